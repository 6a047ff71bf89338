"""Memory: RSS of an agent with 8 idle slots, and of the planner holding a
sweep of 10^3 and of 10^6 configurations (random and grid); the planner's
memory must not grow with the sweep's size.

Each planner is a fresh ``spotsweep planner`` process that accepts one sweep
(no agents: its first ``max_concurrent`` trials wait queued) and is measured
once the trials are written. Peers, each a fresh process:

* 8 idle Optuna workers (PostgreSQL storage, study loaded) against the agent
  (one process supervising 8 trial slots);
* Optuna's GridSampler over the same 10^3 and 10^6 grids after one ``ask``
  (its random sampler, like spotsweep's, holds nothing per configuration).

    python bench/memory.py --big 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import psycopg

OPTUNA_GRID = """
import json, sys, optuna, psutil
optuna.logging.set_verbosity(optuna.logging.WARNING)
side = int(sys.argv[2])
grid = {"a": list(range(side)), "b": list(range(side)), "c": list(range(side))}
study = optuna.create_study(storage=optuna.storages.RDBStorage(sys.argv[1]), sampler=optuna.samplers.GridSampler(grid))
study.ask()
print(json.dumps({"rss_mb": psutil.Process().memory_info().rss / 2**20}))
"""

OPTUNA_IDLE = """
import json, sys, optuna, psutil
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.RDBStorage(sys.argv[1])
study = optuna.create_study(storage=storage, study_name=sys.argv[2], load_if_exists=True)
study.ask()
print(json.dumps({"rss_mb": psutil.Process().memory_info().rss / 2**20}))
"""


def sweep_spec(kind: str, size: int) -> dict[str, Any]:
    base: dict[str, Any] = {"name": f"bench-mem-{kind}", "command": ["/bin/true"], "metric": {"name": "loss", "mode": "min"},
                            "max_concurrent": 20, "resources": {"gpus": 0, "class": "cpu"}}
    if kind == "random":
        return base | {"space": {"lr": {"type": "loguniform", "low": 1e-5, "high": 1e-1}, "wd": {"type": "uniform", "low": 0, "high": 0.1},
                                 "width": [64, 128, 256]},
                       "strategy": {"type": "random", "trials": size, "seed": 0}}
    side = round(size ** (1 / 3))
    return base | {"space": {k: {"type": "int", "low": 0, "high": side - 1} for k in ("a", "b", "c")}, "strategy": {"type": "grid"}}


def planner_rss(c: harness.Cluster, name: str, kind: str, size: int) -> dict[str, Any]:
    proc = c.start(name, "planner", ready="planner running")
    sweep_id, _ = harness.submit(c.amqp_url, sweep_spec(kind, size))
    deadline = time.monotonic() + 120
    with psycopg.connect(c.db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT total_trials, (SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'queued')"
                               " FROM sweeps WHERE sweep_id = %s", (sweep_id, sweep_id)).fetchone()
            if row and row[1] >= 20:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"planner did not accept {sweep_id}\n{c.logs()}")
            time.sleep(0.1)
    time.sleep(0.5)
    rss = harness.rss_mb(proc.pid)
    proc.terminate()
    proc.wait(30)
    return {"configs": int(row[0]), "rss_mb": rss}


def python_rss(code: str, *args: str) -> float:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["rss_mb"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--big", type=int, default=1_000_000, help="configurations of the big sweep (smoke: 100000)")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res: dict[str, Any] = {}
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp, \
            harness.cluster(svc, "spotsweep", Path(tmp)) as c:
        agent = c.agent("agent", args.slots)
        time.sleep(1.0)
        res["agent_idle"] = {"slots": args.slots, "rss_mb": harness.rss_mb(agent.pid, children=True)}
        for kind in ("random", "grid"):
            for size in (args.small, args.big):
                res[f"planner_{kind}_{size}"] = planner_rss(c, f"planner-{kind}-{size}", kind, size)
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        idle = [python_rss(OPTUNA_IDLE, storage, "idle") for _ in range(args.slots)]
        res["optuna_idle_workers"] = {"workers": args.slots, "rss_mb": sum(idle), "each_mb": idle}
        for size in (args.small, args.big):
            side = round(size ** (1 / 3))
            res[f"optuna_grid_{size}"] = {"configs": side**3, "rss_mb": python_rss(OPTUNA_GRID, storage, str(side))}
    rows = [[f"spotsweep agent, {args.slots} idle slots", "-", res["agent_idle"]["rss_mb"]],
            [f"optuna: {args.slots} idle workers", "-", res["optuna_idle_workers"]["rss_mb"]]]
    for kind in ("random", "grid"):
        for size in (args.small, args.big):
            r = res[f"planner_{kind}_{size}"]
            rows.append([f"spotsweep planner, {kind} sweep", r["configs"], r["rss_mb"]])
    for size in (args.small, args.big):
        r = res[f"optuna_grid_{size}"]
        rows.append(["optuna GridSampler after one ask", r["configs"], r["rss_mb"]])
    growth = {kind: res[f"planner_{kind}_{args.big}"]["rss_mb"] - res[f"planner_{kind}_{args.small}"]["rss_mb"]
              for kind in ("random", "grid")}
    growth["optuna_grid"] = res[f"optuna_grid_{args.big}"]["rss_mb"] - res[f"optuna_grid_{args.small}"]["rss_mb"]
    res["growth_mb"] = growth
    print(harness.table("memory (RSS, MiB)", ["process", "configs", "RSS MiB"], rows))
    print(f"growth from {args.small:,} to {args.big:,} configs: " + ", ".join(f"{k} {v:+.1f} MiB" for k, v in growth.items()))
    print(f"ratio optuna idle workers / spotsweep agent: {res['optuna_idle_workers']['rss_mb'] / res['agent_idle']['rss_mb']:.1f}x")
    path = harness.write_json("memory", {"args": vars(args) | {"json": str(args.json)}, "results": res}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
