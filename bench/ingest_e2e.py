"""Metric ingestion end to end: trials append metric lines (10 metrics a
line) as fast as they can; timed from the spec's post until every point is
queryable in ``metric_points``. Real planner, agents, RabbitMQ, collector and
PostgreSQL, each a separate process.

Peer: Optuna's ``trial.report(value, step)`` with PostgreSQL storage, as many
worker processes as spotsweep runs trials; each report is one point. Optuna
writes each point with its own database round trips, so it gets a smaller
``--peer-points`` budget (its rate does not depend on the total).

    python bench/ingest_e2e.py --trials 4 --lines 25000 --repeat 3

The collector's database write path alone (COPY vs row inserts) is
``bench/ingest.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import optuna_peer
import psycopg

# One write() per line, as the trial contract asks; values change every line.
WRITER = """
import os
n = int(os.environ["BENCH_LINES"])
fmt = '{"step": %d' + ''.join(', "m%d": %%r' % j for j in range(10)) + '}\\n'
fd = os.open(os.environ["SPOTSWEEP_METRICS"], os.O_WRONLY | os.O_APPEND)
for step in range(n):
    v = step * 0.001
    os.write(fd, (fmt % (step, v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6, v + 7, v + 8, v + 9)).encode())
os.close(fd)
"""


def writer_spec(trials: int, lines: int) -> dict[str, Any]:
    return {
        "name": "bench-ingest",
        "command": ["python", "-c", WRITER.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "m0", "mode": "min"},
        "space": {"t": {"type": "int", "low": 0, "high": trials - 1}},
        "max_concurrent": trials,
        "retries": {"max_failures": 0},
        "env": {"BENCH_LINES": str(lines)},
        "resources": {"gpus": 0, "class": "cpu"},
    }


def run_spotsweep(c: harness.Cluster, trials: int, lines: int, timeout: float, poll: float = 0.02) -> dict[str, Any]:
    expected = trials * lines * 10
    sweep_id, posted = harness.submit(c.amqp_url, writer_spec(trials, lines))
    deadline = time.monotonic() + timeout
    with psycopg.connect(c.db_url, autocommit=True) as conn:
        # Cheap poll first: the collector commits a trial's finished event
        # after all of its points (one publisher channel, one queue, in order).
        while True:
            n = conn.execute("SELECT count(*) FROM trial_events WHERE sweep_id = %s AND kind = 'trial.finished'",
                             (sweep_id,)).fetchone()
            if n and n[0] >= trials:
                points = conn.execute("SELECT count(*) FROM metric_points WHERE sweep_id = %s", (sweep_id,)).fetchone()
                if points and points[0] >= expected:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"ingest sweep {sweep_id}: {n} finished after {timeout}s\n{c.logs()}")
            time.sleep(poll)
        ended = time.time()
        first = conn.execute("SELECT min((body->>'time')::timestamptz) FROM trial_events WHERE sweep_id = %s"
                             " AND kind = 'trial.started'", (sweep_id,)).fetchone()
    assert points is not None and points[0] == expected, (points, expected)
    started = harness.epoch(first[0]) if first and first[0] else posted
    return {"seconds": ended - posted, "points": points[0], "from_first_start_s": ended - started, "sweep_id": sweep_id}


def reporter(steps: int) -> Any:
    def objective(trial: Any) -> float:
        for step in range(steps):
            trial.report(step * 0.001, step)
        return 0.0

    return objective


def run_optuna(storage: str, name: str, workers: int, points: int) -> dict[str, Any]:
    steps = max(1, points // workers)
    res = optuna_peer.run(storage, name, workers, workers, reporter(steps))
    return {"seconds": res["seconds"], "points": steps * workers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4, help="trials writing at once (one agent slot each)")
    ap.add_argument("--lines", type=int, default=25_000, help="lines per trial, 10 metrics each (smoke: 1000)")
    ap.add_argument("--agents", type=int, default=1)
    ap.add_argument("--peer-points", type=int, default=8000, help="points Optuna reports in all")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="sample the services with py-spy during one extra run into this folder")
    args = ap.parse_args()
    slots = -(-args.trials // args.agents)
    runs: dict[str, list[dict[str, Any]]] = {"spotsweep": [], "optuna": []}
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp, \
            harness.cluster(svc, "spotsweep", Path(tmp)) as c:
        c.control_plane()
        for i in range(args.agents):
            c.agent(f"agent{i}", slots)
        run_spotsweep(c, args.trials, 100, 120)  # warm-up
        c.profiled(args.profile, 8, lambda: run_spotsweep(c, args.trials, args.lines, 900))
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        for r in range(args.repeat):
            runs["spotsweep"].append(run_spotsweep(c, args.trials, args.lines, 900))
            runs["optuna"].append(run_optuna(storage, f"ingest-{r}", args.trials, args.peer_points))
    rows, out = [], {}
    for name, rs in runs.items():
        pps = harness.summary([r["points"] / r["seconds"] for r in rs])
        out[name] = {"points_per_s": pps, "runs": rs}
        rows.append([name, rs[0]["points"], args.trials, pps["median"], f"{pps['min']:,.0f}-{pps['max']:,.0f}",
                     f"{pps['spread']:.0%}"])
    s_first = harness.summary([r["points"] / r["from_first_start_s"] for r in runs["spotsweep"]])
    rows.append(["spotsweep (from 1st start)", runs["spotsweep"][0]["points"], args.trials, s_first["median"],
                 f"{s_first['min']:,.0f}-{s_first['max']:,.0f}", f"{s_first['spread']:.0%}"])
    out["spotsweep_from_first_start"] = {"points_per_s": s_first}
    ratio = out["spotsweep"]["points_per_s"]["median"] / out["optuna"]["points_per_s"]["median"]
    print(harness.table(f"metric ingestion: {args.trials} trials x {args.lines} lines x 10 metrics, "
                        f"{args.agents} agent(s), {args.repeat} runs",
                        ["system", "points", "writers", "points/s", "range", "spread"], rows))
    print(f"ratio spotsweep/optuna (medians): {ratio:.0f}x  (targets: >= 100,000 points/s end to end, >= 50x)")
    path = harness.write_json("ingest_e2e", {"args": vars(args) | {"json": str(args.json)}, "results": out,
                                             "ratio": ratio, "target_points_per_s": 100_000, "target_ratio": 50.0},
                              args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
