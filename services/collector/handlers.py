"""Collector handlers: a batch of events becomes one transaction.

Metric points go through COPY into a temporary staging table and then one
``INSERT ... ON CONFLICT DO NOTHING`` into ``points``, keyed by (trial,
attempt, step, name): a redelivered batch inserts nothing twice. Lifecycle
events are kept in ``trial_events`` keyed by message id. The batch is acked
only after the commit (see ``BatchingHandler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from spotsweep.shared import log
from spotsweep.shared.broker.port import Delivery
from spotsweep.shared.db import Database
from spotsweep.shared.messages import Envelope, TrialMetrics, TrialProgress, decode, json_safe

_log = log.get("spotsweep.collector")

_STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS points_stage"
    " (sweep_id text, trial_id text, attempt int, step bigint, name text, value double precision)"
    " ON COMMIT DELETE ROWS"
)


@dataclass
class CollectorDeps:
    db: Database


def handle_batch(deliveries: Sequence[Delivery], deps: CollectorDeps) -> None:
    """Decode and write a batch. Raises on an undecodable message so the
    batching wrapper can isolate and dead-letter it."""
    write_events([decode(d.body) for d in deliveries], deps.db)


def write_events(events: Sequence[Envelope], db: Database) -> int:
    """Write events idempotently; returns the number of new points."""
    points = [
        (e.sweep_id, e.trial_id, e.attempt, p.step, p.name, p.value)
        for e in events
        if isinstance(e, TrialMetrics)
        for p in e.points
    ]
    lifecycle = [
        (e.message_id, e.sweep_id, e.trial_id, e.attempt, getattr(e, "kind", "?"), Jsonb(json_safe(e.model_dump(mode="json"))))
        for e in events
        # progress repeats the objective's points for the planner; they are stored as points already
        if not isinstance(e, (TrialMetrics, TrialProgress))
    ]
    inserted = 0
    with db.transaction() as conn:
        if points:
            conn.execute(_STAGE)
            with conn.cursor() as cur:
                with cur.copy("COPY points_stage (sweep_id, trial_id, attempt, step, name, value) FROM STDIN") as copy:
                    for row in points:
                        copy.write_row(row)
                cur.execute(
                    "INSERT INTO points (sweep_id, trial_id, attempt, step, name, value)"
                    " SELECT sweep_id, trial_id, attempt, step, name, value FROM points_stage"
                    " ON CONFLICT DO NOTHING"
                )
                inserted = cur.rowcount
        if lifecycle:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO trial_events (message_id, sweep_id, trial_id, attempt, kind, body)"
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    lifecycle,
                )
    if points:
        _log.debug("points written", new=inserted, received=len(points))
    return inserted
