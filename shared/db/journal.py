"""The event journal, ``trial_events``: each lifecycle and checkpoint event once, by message id.

Two writers, each in the transaction that acts on the events, so the journal
never disagrees with what was decided: the planner journals the lifecycle
events it decides (``trial.started``, ``trial.finished``, ``trial.lost``);
the collector journals ``trial.checkpoint``. A redelivered event is the same
message id and changes nothing (``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.types.json import Jsonb

from spotsweep.shared.db import Conn
from spotsweep.shared.messages import Envelope, json_safe


def journal(conn: Conn, events: Sequence[Envelope]) -> None:
    """Record ``events`` in ``trial_events`` (inside the caller's transaction)."""
    if not events:
        return
    rows = [(e.message_id, e.sweep_id, e.trial_id, e.attempt, getattr(e, "kind", "?"), Jsonb(json_safe(e.model_dump(mode="json"))))
            for e in events]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO trial_events (message_id, sweep_id, trial_id, attempt, kind, body)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            rows,
        )
