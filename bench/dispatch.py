"""Dispatch throughput: N no-op trials (``/bin/true``) from submit to the
sweep finished, through the real planner, RabbitMQ, agents with several
slots, the collector and PostgreSQL, each a separate process.

Peer: Optuna with PostgreSQL storage, as many worker processes as spotsweep
has slots, on a trivial objective (one ``suggest_int``). Both run in the same
invocation, alternating, ``--repeat`` times; the table gives the median and
the spread of the runs, and the ratio of the medians.

* trials/s: N / (sweep ``finished_at`` - the moment the spec was posted).
* per-trial overhead: wall time a worker (slot) spends per trial,
  ``seconds * workers / N``: for a no-op trial, all of it is overhead.

    python bench/dispatch.py --trials 400 --agents 2 --slots 4 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import harness
import optuna_peer
import psycopg


def noop_spec(n: int, concurrent: int) -> dict[str, Any]:
    return {
        "name": "bench-dispatch",
        "command": ["/bin/true"],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"i": {"type": "int", "low": 0, "high": n - 1}},
        "strategy": {"type": "grid"},
        "max_concurrent": concurrent,
        "retries": {"max_failures": 0},
        "resources": {"gpus": 0, "class": "cpu"},
    }


def trivial(trial: Any) -> float:
    return float(trial.suggest_int("i", 0, 1_000_000))


def run_spotsweep(c: harness.Cluster, n: int, concurrent: int, timeout: float) -> dict[str, Any]:
    sweep_id, posted = harness.submit(c.amqp_url, noop_spec(n, concurrent))
    row = harness.wait_sweep(c.db_url, sweep_id, timeout)
    with psycopg.connect(c.db_url) as conn:
        done = conn.execute("SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'completed'", (sweep_id,)).fetchone()
    if row["state"] != "completed" or done is None or done[0] != n:
        raise RuntimeError(f"sweep {sweep_id}: {row['state']}, {done} of {n} completed\n{c.logs()}")
    return {"seconds": harness.epoch(row["finished_at"]) - posted, "completed": done[0], "sweep_id": sweep_id}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=400, help="trials per run (smoke: 40)")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4, help="slots per agent")
    ap.add_argument("--concurrent", type=int, help="the spec's max_concurrent (default: 2 x all slots)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="sample the services with py-spy during one extra run into this folder")
    args = ap.parse_args()
    workers = args.agents * args.slots
    concurrent = args.concurrent or 2 * workers
    runs: dict[str, list[dict[str, Any]]] = {"spotsweep": [], "optuna": []}
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp, \
            harness.cluster(svc, "spotsweep", Path(tmp)) as c:
        c.control_plane()
        for i in range(args.agents):
            c.agent(f"agent{i}", args.slots)
        run_spotsweep(c, max(workers, 8), concurrent, 120)  # warm-up: connections, caches, imports
        c.profiled(args.profile, 10, lambda: run_spotsweep(c, args.trials, concurrent, 600))
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        for r in range(args.repeat):
            runs["spotsweep"].append(run_spotsweep(c, args.trials, concurrent, 600))
            res = optuna_peer.run(storage, f"dispatch-{r}", args.trials, workers, trivial)
            counts = optuna_peer.count_trials(storage, f"dispatch-{r}")
            if counts.get("COMPLETE") != args.trials:
                raise RuntimeError(f"optuna completed {counts}")
            runs["optuna"].append({"seconds": res["seconds"], "completed": counts["COMPLETE"]})
    rows, out = [], {}
    for name, rs in runs.items():
        tps = harness.summary([args.trials / r["seconds"] for r in rs])
        overhead = harness.summary([r["seconds"] * workers / args.trials * 1000 for r in rs])
        out[name] = {"trials_per_s": tps, "overhead_ms": overhead, "runs": rs}
        rows.append([name, args.trials, workers, tps["median"], f"{tps['min']:.1f}-{tps['max']:.1f}",
                     overhead["median"], f"{tps['spread']:.0%}"])
    ratio = out["spotsweep"]["trials_per_s"]["median"] / out["optuna"]["trials_per_s"]["median"]
    per_run = [o["seconds"] / s["seconds"] for s, o in zip(runs["spotsweep"], runs["optuna"])]
    print(harness.table(f"dispatch: {args.trials} no-op trials, {args.agents} agents x {args.slots} slots, "
                        f"max_concurrent {concurrent}, {args.repeat} runs",
                        ["system", "trials", "workers", "trials/s", "range", "overhead ms/trial", "spread"], rows))
    print(f"ratio spotsweep/optuna (medians): {ratio:.2f}x  (per run: {', '.join(f'{x:.2f}' for x in per_run)}; "
          f"target >= 5x)")
    path = harness.write_json("dispatch", {"args": vars(args) | {"json": str(args.json)}, "workers": workers,
                                           "max_concurrent": concurrent, "results": out, "ratio": ratio,
                                           "ratio_per_run": per_run, "target_ratio": 5.0}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
