"""Headline: best against best. No-op trials (``/bin/true``) from submit to the sweep
finished, spotsweep on the production path (planner, collector and agents as
processes over RabbitMQ, PostgreSQL and S3 from moto's server) against each peer at
its best configuration found in the same run: Optuna at 1, 2, 4 and 8 worker
processes over PostgreSQL, and Ray Tune with its defaults and with the settings its
docs advise for many short trials (in its own virtualenv, built when missing).

Also in the same run, so their ratios share the machine's load: spotsweep with local
artifacts (the S3 path's target is within 15% of it), and the S3 path with the
services of ``--before`` (before/after of a change; default: none).

Every round runs each system once, in turn; ``--repeat`` rounds; each figure is the
median with its range and the 1-minute load average at its start (these machines
are shared: read the ratios of one round, not absolute rates). PostgreSQL is
checkpointed before every measured run, so none pays for the writes of the one before.

    python bench/headline.py --trials 400 --repeat 3 --before dca6807^
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dispatch
import harness
import optuna_peer


@contextmanager
def _services_rev(rev: str | None) -> Iterator[None]:
    """Run the block with the services (and the harness's spec posting) of ``rev``; None: the working tree."""
    old = os.environ.pop("SPOTSWEEP_BENCH_SERVICES_REV", None)
    if rev:
        os.environ["SPOTSWEEP_BENCH_SERVICES_REV"] = rev
    try:
        yield
    finally:
        os.environ.pop("SPOTSWEEP_BENCH_SERVICES_REV", None)
        if old:
            os.environ["SPOTSWEEP_BENCH_SERVICES_REV"] = old


def spotsweep_run(svc: harness.Services, tmp: Path, label: str, s3: dict[str, str] | None, rev: str | None,
                  args: argparse.Namespace) -> dict[str, Any]:
    """One measured sweep on a fresh set of services (started, warmed up, stopped)."""
    concurrent = 2 * args.agents * args.slots
    with _services_rev(rev), harness.cluster(svc, label, Path(tempfile.mkdtemp(dir=tmp, prefix=f"{label}-")), s3=s3) as c:
        c.control_plane()
        for i in range(args.agents):
            c.agent(f"agent{i}", args.slots)
        dispatch.run_spotsweep(c, max(16, args.agents * args.slots), concurrent, 300)  # warm-up
        harness.settle()
        load = harness.load_1m()
        run = dispatch.run_spotsweep(c, args.trials, concurrent, 600)
    return {"seconds": run["seconds"], "n": args.trials, "workers": args.agents * args.slots, "load": load}


def optuna_run(storage: str, name: str, workers: int, n: int) -> dict[str, Any]:
    harness.settle()
    load = harness.load_1m()
    res = optuna_peer.run(storage, name, n, workers, dispatch.trivial)
    counts = optuna_peer.count_trials(storage, name)
    if counts.get("COMPLETE") != n:
        raise RuntimeError(f"optuna {name}: {counts}")
    return {"seconds": res["seconds"], "n": n, "workers": workers, "load": load}


def ray_run(python: Path, mode: str, workers: int, n: int) -> dict[str, Any]:
    harness.settle()
    load = harness.load_1m()
    job = json.dumps({"n": n, "workers": workers, "mode": mode})
    done = subprocess.run([str(python), str(Path(__file__).with_name("ray_dispatch.py"))], input=job, text=True,
                          capture_output=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"ray {mode}: {done.stderr[-2000:]}")
    res = json.loads(done.stdout.strip().splitlines()[-1])
    if res["completed"] != n:
        raise RuntimeError(f"ray {mode}: {res['completed']} of {n} completed")
    return {"seconds": res["seconds"], "n": n, "workers": workers, "load": load}


def rate(r: dict[str, Any]) -> float:
    return float(r["n"] / r["seconds"])


def row(name: str, config: str, rs: list[dict[str, Any]]) -> list[Any]:
    tps = harness.summary([rate(r) for r in rs])
    overhead = statistics.median(r["seconds"] * r["workers"] / r["n"] * 1000 for r in rs)
    loads = ", ".join(f"{r['load']:.1f}" for r in rs)
    return [name, config, tps["median"], f"{tps['min']:.1f}-{tps['max']:.1f}", overhead, loads]


def ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """a against b: the ratio of the medians and the ratio within each round."""
    per_round = [rate(x) / rate(y) for x, y in zip(a, b)]
    return {"medians": statistics.median(rate(x) for x in a) / statistics.median(rate(y) for y in b),
            "per_round": per_round}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=400, help="trials per spotsweep and Optuna run (smoke: 40)")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4, help="slots per agent")
    ap.add_argument("--optuna-workers", default="1,2,4,8")
    ap.add_argument("--before", help="git revision of the services for the S3 path's 'before' row")
    ap.add_argument("--ray-trials", type=int, default=100, help="trials per tuned Ray Tune run (0: no Ray)")
    ap.add_argument("--ray-default-trials", type=int, default=20,
                    help="trials per Ray Tune run at its defaults (a new actor per trial: seconds each here)")
    ap.add_argument("--ray-workers", type=int, default=os.cpu_count() or 2,
                    help="Ray's CPUs (default: the machine's; 8 on 2 cores ran 6x slower, tuned)")
    ap.add_argument("--no-build-ray", action="store_true", help="skip Ray Tune unless its virtualenv exists")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    slots = args.agents * args.slots
    workers = [int(w) for w in args.optuna_workers.split(",")]
    ray, ray_note = (None, "Ray Tune skipped: --ray-trials 0") if args.ray_trials <= 0 else harness.ray_python(not args.no_build_ray)
    if ray is None:
        print(ray_note)
    runs: dict[str, list[dict[str, Any]]] = {}

    def add(key: str, result: dict[str, Any]) -> None:
        runs.setdefault(key, []).append(result)
        print(f"  {key}: {rate(result):.1f} trials/s (load {result['load']:.1f})", flush=True)

    with harness.services() as svc, harness.moto_s3() as s3, tempfile.TemporaryDirectory(prefix="bench-headline-") as t:
        tmp = Path(t)
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        for r in range(args.repeat):
            print(f"round {r + 1} of {args.repeat}", flush=True)
            add("spotsweep s3", spotsweep_run(svc, tmp, "s3", s3, None, args))
            for w in workers[:2]:
                add(f"optuna {w}", optuna_run(storage, f"headline-{r}-{w}", w, args.trials))
            add("spotsweep local", spotsweep_run(svc, tmp, "local", None, None, args))
            for w in workers[2:]:
                add(f"optuna {w}", optuna_run(storage, f"headline-{r}-{w}", w, args.trials))
            if args.before:
                add("spotsweep s3 before", spotsweep_run(svc, tmp, "s3before", s3, args.before, args))
            if ray is not None:
                add("ray default", ray_run(ray, "default", args.ray_workers, args.ray_default_trials))
                add("ray tuned", ray_run(ray, "tuned", args.ray_workers, args.ray_trials))
    best_w = max(workers, key=lambda w: statistics.median(rate(x) for x in runs[f"optuna {w}"]))
    best = runs[f"optuna {best_w}"]
    # The best configuration of each round, too: the headline must not hinge on which one won overall.
    best_each = [max((runs[f"optuna {w}"][i] for w in workers), key=rate) for i in range(args.repeat)]
    out: dict[str, Any] = {
        "optuna_best_workers": best_w,
        "s3_vs_optuna_best": ratios(runs["spotsweep s3"], best),
        "s3_vs_optuna_best_of_each_round": ratios(runs["spotsweep s3"], best_each),
        "local_vs_optuna_best": ratios(runs["spotsweep local"], best),
        "s3_vs_local": ratios(runs["spotsweep s3"], runs["spotsweep local"]),
        "s3_vs_optuna_same_slots": ratios(runs["spotsweep s3"], runs[f"optuna {slots}"]) if slots in workers else None,
    }
    if args.before:
        out["s3_after_vs_before"] = ratios(runs["spotsweep s3"], runs["spotsweep s3 before"])
    if ray is not None:
        out["s3_vs_ray_tuned"] = ratios(runs["spotsweep s3"], runs["ray tuned"])
    rows = [row("spotsweep", f"S3 (moto), {args.agents} agents x {args.slots} slots", runs["spotsweep s3"]),
            row("spotsweep", "local artifacts, same", runs["spotsweep local"])]
    if args.before:
        rows.append(row("spotsweep", f"S3, services at {args.before}", runs["spotsweep s3 before"]))
    rows += [row("optuna", f"{w} workers" + (" (best)" if w == best_w else ""), runs[f"optuna {w}"]) for w in workers]
    if ray is not None:
        rows += [row("ray tune", f"{mode}, {args.ray_workers} CPUs, {n} trials", runs[f"ray {mode}"])
                 for mode, n in (("default", args.ray_default_trials), ("tuned", args.ray_trials))]
    print(harness.table(f"headline: {args.trials} no-op trials per run, {args.repeat} rounds, load = 1-min load average "
                        f"at each run's start", ["system", "configuration", "trials/s", "range", "overhead ms/trial",
                                                 "load per round"], rows))
    for key, value in out.items():
        if isinstance(value, dict):
            print(f"{key}: {value['medians']:.2f}x (per round: {', '.join(f'{x:.2f}' for x in value['per_round'])})")
        elif value is not None:
            print(f"{key}: {value}")
    if ray is None:
        print(ray_note)
    path = harness.write_json("headline", {"args": vars(args) | {"json": str(args.json)}, "runs": runs, "ratios": out,
                                           "ray": harness.RAY_REQUIREMENT if ray else ray_note}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
