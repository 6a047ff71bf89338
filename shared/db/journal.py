"""The event journal, ``trial_events``: each lifecycle and checkpoint event once, by message id.

Two writers, each in the transaction that acts on the events, so the journal
never disagrees with what was decided: the planner journals the lifecycle
events it decides (``trial.started``, ``trial.finished``, ``trial.lost``);
the collector journals ``trial.checkpoint``. A redelivered event is the same
message id and changes nothing (``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from spotsweep.shared.db import Conn
from spotsweep.shared.messages import Envelope, json_safe


def journal(conn: Conn, events: Sequence[Envelope], bodies: Mapping[str, bytes] | None = None) -> None:
    """Record ``events`` in ``trial_events`` (inside the caller's transaction).
    ``bodies``: the events' bytes as they came off the wire, by message id."""
    if not events:
        return
    rows = [(e.message_id, e.sweep_id, e.trial_id, e.attempt, getattr(e, "kind", "?"), _body(e, bodies)) for e in events]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO trial_events (message_id, sweep_id, trial_id, attempt, kind, body)"
            " VALUES (%s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT DO NOTHING",
            rows,
        )


def _body(event: Envelope, bodies: Mapping[str, bytes] | None) -> str:
    """The event as JSON text that jsonb takes: the received bytes when they
    are strict JSON (no bare NaN or Infinity, which jsonb refuses), which
    spares a dump and a walk of every event; else the event re-encoded with
    the trial contract's strings for non-finite values. A NUL (``\\u0000``,
    which jsonb refuses too) becomes U+FFFD: the journal keeps the event, not
    every byte of a hostile one."""
    raw = bodies.get(event.message_id) if bodies else None
    if raw is not None and b"NaN" not in raw and b"Infinity" not in raw:
        text = raw.decode()
    else:
        text = json.dumps(json_safe(event.model_dump(mode="json")))
    # Both escapes are six characters of the same shape, so the JSON stays valid.
    return text.replace("\\u0000", "\\ufffd") if "\\u0000" in text else text
