"""Where a dispatched trial's CPU goes: milliseconds of CPU per no-op trial in
each process (agents, trial processes, planner, collector, RabbitMQ,
PostgreSQL), for two revisions of the services, alternating in one run.

dispatch.py gives trials/s against Optuna; on 2 cores that rate is bound by
the CPU every process spends per trial, so this is the figure a change to
the hot path must move. CPU time, unlike wall time, is little disturbed by a
busy machine, but not immune: alternate and compare the pairs.

    python bench/dispatch_cpu.py --before 6a9cd03              # that revision vs the working tree
    python bench/dispatch_cpu.py --before A --after B --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import dispatch
import harness
import psutil

SERVER = {"beam.smp": "rabbitmq", "postgres": "postgres"}


def _server_cpu() -> dict[str, float]:
    out = dict.fromkeys(SERVER.values(), 0.0)
    for p in psutil.process_iter(["name"]):
        key = SERVER.get(p.info["name"] or "")
        if key is not None:
            try:
                t = p.cpu_times()
                out[key] += t.user + t.system
            except psutil.Error:
                pass  # a backend that just exited
    return out


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    out = _server_cpu()
    for name, pid in pids.items():
        t = psutil.Process(pid).cpu_times()
        key = "agents" if name.startswith("agent") else name
        out[key] = out.get(key, 0.0) + t.user + t.system
        out["trial processes"] = out.get("trial processes", 0.0) + t.children_user + t.children_system
    return out


def measure(rev: str | None, trials: int, agents: int, slots: int, concurrent: int) -> dict[str, Any]:
    """One run of ``trials`` no-op trials on the services of ``rev`` (None: the working tree)."""
    if rev:
        os.environ["SPOTSWEEP_BENCH_SERVICES_REV"] = rev
    else:
        os.environ.pop("SPOTSWEEP_BENCH_SERVICES_REV", None)
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp, \
            harness.cluster(svc, "cpu", Path(tmp)) as c:
        c.control_plane()
        for i in range(agents):
            c.agent(f"agent{i}", slots)
        dispatch.run_spotsweep(c, max(16, agents * slots), concurrent, 120)  # warm-up
        pids = {name: p.pid for name, p in c.procs.items()}
        before = _cpu(pids)
        run = dispatch.run_spotsweep(c, trials, concurrent, 600)
        after = _cpu(pids)
    ms = {k: (after[k] - before.get(k, 0.0)) / trials * 1000 for k in after}
    return {"trials_per_s": trials / run["seconds"], "cpu_ms_per_trial": ms, "total_ms": sum(ms.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision of the services before the change")
    ap.add_argument("--after", help="git revision after (default: the working tree)")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    concurrent = 2 * args.agents * args.slots
    labels = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.repeat):
        for label, rev in labels.items():
            runs[label].append(measure(rev, args.trials, args.agents, args.slots, concurrent))
    os.environ.pop("SPOTSWEEP_BENCH_SERVICES_REV", None)  # the table names both revisions itself
    keys = sorted({k for rs in runs.values() for r in rs for k in r["cpu_ms_per_trial"]})
    med = {label: {k: statistics.median(r["cpu_ms_per_trial"].get(k, 0.0) for r in rs) for k in keys}
           for label, rs in runs.items()}
    rows = [[k, med["before"][k], med["after"][k]] for k in keys]
    rows.append(["total", statistics.median(r["total_ms"] for r in runs["before"]),
                 statistics.median(r["total_ms"] for r in runs["after"])])
    rows.append(["trials/s", statistics.median(r["trials_per_s"] for r in runs["before"]),
                 statistics.median(r["trials_per_s"] for r in runs["after"])])
    after_name = args.after or "working tree"
    print(harness.table(f"CPU ms per no-op trial, {args.trials} trials, {args.agents} agents x {args.slots} slots, "
                        f"medians of {args.repeat} alternating runs",
                        ["process", args.before, after_name], rows))
    path = harness.write_json("dispatch_cpu", {"args": vars(args) | {"json": str(args.json)}, "runs": runs,
                                               "medians": med}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
