"""The planner's cost per trial event as a sweep's history grows.

A sweep of 20,000 trials (random search with median early stopping, so
every progress event asks the search about the sweep's whole history) is
filled in PostgreSQL with ``--at`` finished trials each (completed, with a
curve of ``--steps`` points), plus ``--running`` running ones. The planner's
own handler, in process (no broker: the in-memory one), then decides for
each running trial its progress events (one step each) and its end (which
launches the next trial); the time per event is reported at each level.

Before the search history was cached, a progress event read every trial of
the sweep (its row and the curve's point at that step): the cost grew with
the number of finished trials. With the cache it reads only the trials in
flight.

    python bench/planner_events.py --at 100 5000 20000 --json bench/results/planner_events.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from spotsweep.services.planner.handlers import PlannerDeps, handle_events, handle_sweep_message
from spotsweep.services.planner.search import Search
from spotsweep.shared import log, topology
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.db import Database
from spotsweep.shared.messages import TrialFinished, TrialProgress, TrialStarted, encode

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TOTAL = 20_000


class _Delivery:
    def __init__(self, body: bytes, headers: dict[str, Any] | None = None) -> None:
        self.body, self.headers, self.message_id, self.redelivered = body, headers or {}, None, False

    def ack(self) -> None:
        pass


def _spec(total: int) -> dict[str, Any]:
    return {"name": "bench", "command": ["true"], "metric": {"name": "loss", "mode": "min"},
            "space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}},
            "strategy": {"type": "random", "trials": total, "seed": 0}, "max_concurrent": 32,
            "early_stop": {"type": "median", "startup_trials": 5, "warmup_steps": 0, "interval_steps": 1,
                           "min_trials": 1}, "resources": {"gpus": 1, "class": "cpu"}}


def _fill(db: Database, sweep_id: str, finished: int, running: int, steps: int) -> list[str]:
    """Replace the sweep's trials by ``finished`` completed and ``running`` running ones."""
    curve = "jsonb_build_object(" + ", ".join(f"'{s}', 1.0 / ({s} + i %% 97)" for s in range(1, steps + 1)) + ")"
    with db.transaction() as conn:
        conn.execute("DELETE FROM trials WHERE sweep_id = %s", (sweep_id,))
        conn.execute(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics, curve, run_id,"
            " run_seconds, started_at, finished_at, agent)"
            f" SELECT %(s)s || '.' || i, %(s)s, i, 'bench_' || i, jsonb_build_object('lr', 0.001), 'completed',"
            f" jsonb_build_object('loss', 1.0 / (1 + i %% 97)), {curve}, 'r', 1.0, now(), now(), 'a'"
            " FROM generate_series(0, %(n)s - 1) i", {"s": sweep_id, "n": finished})
        conn.execute(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, run_id, run_started_at,"
            " started_at, agent) SELECT %(s)s || '.' || i, %(s)s, i, 'bench_' || i, jsonb_build_object('lr', 0.001),"
            " 'running', 'r', now(), now(), 'a' FROM generate_series(%(n)s, %(n)s + %(r)s - 1) i",
            {"s": sweep_id, "n": finished, "r": running})
        conn.execute("UPDATE sweeps SET next_index = %s, state = 'running' WHERE sweep_id = %s",
                     (finished + running, sweep_id))
    with psycopg.connect(db.url, autocommit=True) as c:  # statistics as autovacuum would soon have them
        c.execute("VACUUM ANALYZE trials")
    return [f"{sweep_id}.{i}" for i in range(finished, finished + running)]


_IN_SEARCH = [0.0]  # seconds spent in the search's own decisions (Search.on_report, ...)


def _timed_search() -> None:
    """Count the time spent in the search's pure decisions apart from the planner's own."""
    for name in ("on_report", "on_run_end", "propose"):
        method = getattr(Search, name)

        def timed(self: Search, *a: Any, _method: Any = method, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _method(self, *a, **kw)
            finally:
                _IN_SEARCH[0] += time.perf_counter() - t0

        setattr(Search, name, timed)


def _time(deps: PlannerDeps, events: list[Any]) -> tuple[list[float], list[float]]:
    """Each event's time in all, and outside the search's decisions."""
    total, own = [], []
    for event in events:
        _IN_SEARCH[0] = 0.0
        t0 = time.perf_counter()
        handle_events([_Delivery(encode(event))], deps)
        total.append(time.perf_counter() - t0)
        own.append(total[-1] - _IN_SEARCH[0])
    return total, own


def _level(deps: PlannerDeps, sweep_id: str, finished: int, args: argparse.Namespace) -> dict[str, Any]:
    trials = _fill(deps.db, sweep_id, finished, args.running, args.steps)
    # warm: the planner's caches (spec, search, history) as a long-running planner has them
    _time(deps, [TrialStarted(sweep_id=sweep_id, trial_id=trials[0], attempt=1, agent="a", run_id="r")])
    progress = [TrialProgress(sweep_id=sweep_id, trial_id=t, attempt=1, run_id="r", points=[(s, 0.001)])
                for s in range(1, args.steps + 1) for t in trials]
    ends = [TrialFinished(sweep_id=sweep_id, trial_id=t, attempt=1, outcome="completed", run_id="r",
                          metrics={"loss": 0.001}, agent="a") for t in trials]
    (p, p_own), (e, e_own) = _time(deps, progress), _time(deps, ends)

    def ms(xs: list[float]) -> float:
        return round(1000 * statistics.median(xs), 3)

    return {"finished": finished, "progress_ms": ms(p), "progress_planner_ms": ms(p_own), "progress_max_ms": ms([max(p)]),
            "finish_ms": ms(e), "finish_planner_ms": ms(e_own), "events": len(p) + len(e)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at", type=int, nargs="+", default=[100, 5000, 20000], help="finished trials at each level")
    ap.add_argument("--running", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="curve points of each finished trial; progress steps timed")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    log.configure("WARNING")
    _timed_search()
    name = f"spotsweep_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    db = Database(ADMIN.rsplit("/", 1)[0] + f"/{name}")
    try:
        db.migrate()
        broker = MemoryBroker()
        broker.declare(topology.service_queues(("cpu",)))
        deps = PlannerDeps(db=db, broker=broker)
        sweep_id = "bench-000000a0"
        handle_sweep_message(_Delivery(json.dumps(_spec(max(args.at) + 10 * args.running)).encode(),
                                       {"sweep_id": sweep_id}), deps)
        rows = [_level(deps, sweep_id, n, args) for n in args.at]
    finally:
        db.close()
        with psycopg.connect(ADMIN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print("median ms per event; 'planner': outside the search's own decisions; 'max': the slowest progress event")
    print(f"{'finished':>9} {'progress':>9} {'planner':>8} {'max':>8} {'finish':>8} {'planner':>8}")
    for r in rows:
        print(f"{r['finished']:>9} {r['progress_ms']:>9} {r['progress_planner_ms']:>8} {r['progress_max_ms']:>8}"
              f" {r['finish_ms']:>8} {r['finish_planner_ms']:>8}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"host": platform.node(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
