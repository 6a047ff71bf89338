"""Metric ingestion into PostgreSQL: the collector's write path against the
obvious one, measured in the same run on the same database.

* spotsweep: ``write_events`` — COPY into a staging table, then one
  ``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` per batch of events.
* peer: the same idempotent insert row by row with ``executemany`` (what a
  handler that writes each point as it comes does), in batches of the same size.

Prints points/s for both and the ratio; writes JSON with ``--json``. The
database is a fresh one created and dropped by the script.

    python bench/ingest.py --points 200000 --admin-url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import uuid
from pathlib import Path

import psycopg

from spotsweep.services.collector.handlers import write_events
from spotsweep.shared import log
from spotsweep.shared.db import Database
from spotsweep.shared.messages import MetricPoint, TrialMetrics


def events(n_points: int, per_event: int, tag: str) -> list[TrialMetrics]:
    out, step = [], 0
    while len(out) * per_event < n_points:
        pts = [MetricPoint(step=step, name=f"m{j}", value=step * 0.001 + j) for j in range(10)]
        step += 1
        batch = pts * (per_event // 10)
        out.append(TrialMetrics(sweep_id="bench", trial_id=f"{tag}.{step % 8}", attempt=1,
                                points=[MetricPoint(step=step * 1000 + i, name=p.name, value=p.value) for i, p in enumerate(batch)]))
    return out


def peer(evs: list[TrialMetrics], db: Database, batch_events: int) -> None:
    for i in range(0, len(evs), batch_events):
        rows = [(e.sweep_id, e.trial_id, e.attempt, p.step, p.name, p.value) for e in evs[i:i + batch_events] for p in e.points]
        with db.transaction() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO points (sweep_id, trial_id, attempt, step, name, value) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                rows,
            )


def ours(evs: list[TrialMetrics], db: Database, batch_events: int) -> None:
    for i in range(0, len(evs), batch_events):
        write_events(evs[i:i + batch_events], db)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--per-event", type=int, default=100, help="points per metrics message (agents batch lines)")
    ap.add_argument("--batch-events", type=int, default=50, help="messages per collector transaction")
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    log.configure("WARNING")
    name = f"spotsweep_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db = Database(args.admin_url.rsplit("/", 1)[0] + f"/{name}")
        db.migrate()
        results = {}
        for label, fn in (("peer executemany", peer), ("spotsweep COPY", ours)):
            evs = events(args.points, args.per_event, label.split()[0])
            n = sum(len(e.points) for e in evs)
            started = time.perf_counter()
            fn(evs, db, args.batch_events)
            elapsed = time.perf_counter() - started
            results[label] = {"points": n, "seconds": round(elapsed, 3), "points_per_s": round(n / elapsed)}
        db.close()
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    ratio = results["spotsweep COPY"]["points_per_s"] / results["peer executemany"]["points_per_s"]
    print(f"{'path':<20}{'points':>10}{'seconds':>10}{'points/s':>12}")
    for label, r in results.items():
        print(f"{label:<20}{r['points']:>10}{r['seconds']:>10}{r['points_per_s']:>12}")
    print(f"ratio spotsweep/peer: {ratio:.1f}x  ({platform.node()}, {platform.python_version()})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": results, "ratio": ratio, "args": vars(args) | {"json": str(args.json)}}, indent=2))


if __name__ == "__main__":
    main()
