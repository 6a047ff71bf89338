"""Collector handlers: a batch of events becomes one transaction.

Metric points are COPied (binary format) straight into ``points``, whose
primary key is (trial, attempt, step, name). A batch that repeats a key (a
redelivery after a crash, an overlap) fails that COPY inside a savepoint; the
batch then goes through a temporary staging table and one ``INSERT ... ON
CONFLICT DO NOTHING``, so nothing is inserted twice and the first value of a
key stays. The fast path skips the staging copy, which halves PostgreSQL's
work per point (measured by bench/ingest.py, now in git history); redeliveries are rare. Checkpoint
events are journaled in ``trial_events`` by message id (lifecycle events are
journaled by the planner, which decides them). An agent's announcement
(``agent.seen``) updates its row of ``agents``. The batch is acked only after the commit.

One bad point hurts no one: a point the database could not take is dropped with a warning
(:func:`storable_points`) and its message's other points are stored; the agent refuses such points
already, this guards against an old or hostile publisher. Whatever else the database refuses for
good fails the batch, which ``BatchingHandler`` splits until that message alone is dead-lettered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from spotsweep.shared import log
from spotsweep.shared.db import Conn, Database
from spotsweep.shared.db.journal import journal
from spotsweep.shared.limits import HARD_METRIC_NAME_CHARS, Limits, metric_name_problem
from spotsweep.shared.messages import AgentSeen, Envelope, TrialMetrics, TrialProgress

_log = log.get("spotsweep.collector")

_COLUMNS = "(sweep_id, trial_id, attempt, step, name, value)"
_TYPES = ["text", "text", "int4", "int8", "text", "float8"]  # binary COPY: the columns' types, in order
_STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS points_stage"
    " (sweep_id text, trial_id text, attempt int, step bigint, name text, value double precision)"
    " ON COMMIT DELETE ROWS"
)
_NAMES = Limits(metric_name_chars=HARD_METRIC_NAME_CHARS)  # what the database can index, whatever the spec allows
_STEPS = (-(2**63), 2**63 - 1)  # points.step is a bigint
Point = tuple[str, str, int, int, str, float]  # a row of points, in _COLUMNS order


def write_events(events: Sequence[Envelope], db: Database) -> int:
    """Write events idempotently; returns the number of new points."""
    points = [p for e in events if isinstance(e, TrialMetrics) for p in storable_points(e)]
    # Progress repeats the objective's points for the planner: they are stored as points already.
    other = [e for e in events if not isinstance(e, (TrialMetrics, TrialProgress, AgentSeen))]
    agents = [e for e in events if isinstance(e, AgentSeen)]
    inserted = 0
    with db.transaction() as conn:
        if points:
            inserted = _write_points(conn, points)
        journal(conn, other)
        if agents:
            _write_agents(conn, agents)
    if points:
        _log.debug("points written", new=inserted, received=len(points))
    return inserted


def storable_points(event: TrialMetrics) -> list[Point]:
    """The event's points as rows, without those the database could not take (logged)."""
    rows = zip(event.steps, event.names, event.values)
    bad = {name: why for name in set(event.names) if (why := metric_name_problem(name, _NAMES))}
    if not bad and (not event.steps or (_STEPS[0] <= min(event.steps) and max(event.steps) <= _STEPS[1])):
        return [(event.sweep_id, event.trial_id, event.attempt, step, name, value) for step, name, value in rows]
    kept = [(event.sweep_id, event.trial_id, event.attempt, step, name, value) for step, name, value in rows
            if name not in bad and _STEPS[0] <= step <= _STEPS[1]]
    reason = next(iter(bad.values()), "a step outside a bigint")
    _log.warning("points dropped", trial_id=event.trial_id, attempt=event.attempt, message_id=event.message_id,
                 dropped=len(event.steps) - len(kept), kept=len(kept), reason=reason)
    return kept


def _copy(cur: psycopg.Cursor[Any], table: str, rows: Sequence[tuple[Any, ...]]) -> None:
    with cur.copy(f"COPY {table} {_COLUMNS} FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_TYPES)
        for row in rows:
            copy.write_row(row)


def _write_points(conn: Conn, points: Sequence[tuple[Any, ...]]) -> int:
    """Insert the points no earlier batch stored; returns how many were new."""
    try:
        with conn.transaction(), conn.cursor() as cur:  # a savepoint inside the batch's transaction
            _copy(cur, "points", points)
        return len(points)
    except psycopg.errors.UniqueViolation:
        pass  # some key is stored already: insert only the new ones
    conn.execute(_STAGE)
    with conn.cursor() as cur:
        _copy(cur, "points_stage", points)
        cur.execute(f"INSERT INTO points {_COLUMNS} SELECT {_COLUMNS[1:-1]} FROM points_stage ON CONFLICT DO NOTHING")
        return cur.rowcount


def _write_agents(conn: Conn, seen: Sequence[AgentSeen]) -> None:
    """Each agent's newest announcement (an older one, delivered late, changes nothing)."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO agents (agent_id, resource_class, slots, cpus, memory, gpus, last_seen)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id) DO UPDATE SET"
            " resource_class = EXCLUDED.resource_class, slots = EXCLUDED.slots, cpus = EXCLUDED.cpus,"
            " memory = EXCLUDED.memory, gpus = EXCLUDED.gpus, last_seen = EXCLUDED.last_seen"
            " WHERE agents.last_seen <= EXCLUDED.last_seen",
            [(e.agent, e.resource_class, e.slots, e.cpus, e.memory, e.gpus, e.time) for e in seen])
