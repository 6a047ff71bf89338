"""The SQL of PBT's lineage (``pbt_segments``) and of the checkpoints a trial resumes from.

:mod:`.exploit` decides what to write; :class:`.ports.PgTrials` calls these
functions inside the caller's transaction. ``pbt_segments`` is the planner's
(migration 0007); ``trial_events`` is the journal, whose ``trial.checkpoint``
rows the collector writes (:mod:`spotsweep.shared.db.journal`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from spotsweep.shared.db import Conn, Row


class Segment(NamedTuple):
    """A segment a PBT trial goes on with: its attempt, its budgets, its params and,
    for an exploit, the donor and the donor's step it resumes at (until copied)."""

    trial_id: str
    segment: int
    sweep_id: str
    attempt: int
    start_step: int
    end_step: int
    params: dict[str, Any]
    from_trial_id: str | None = None
    from_step: int | None = None


def end_segment(conn: Conn, trial_id: str, sweep_id: str, end_step: int, params: dict[str, Any], value: float) -> int:
    conn.execute(
        "INSERT INTO pbt_segments (trial_id, segment, sweep_id, attempt, start_step, end_step, params)"
        " VALUES (%s, 1, %s, 1, 0, %s, %s) ON CONFLICT DO NOTHING", (trial_id, sweep_id, end_step, Jsonb(params)))
    row = conn.execute(
        "UPDATE pbt_segments SET value = %s WHERE trial_id = %s AND segment ="
        " (SELECT max(segment) FROM pbt_segments WHERE trial_id = %s) RETURNING segment",
        (value, trial_id, trial_id)).fetchone()
    return int(row["segment"])  # type: ignore[index]  # the insert above made one


def add_segment(conn: Conn, s: Segment) -> None:
    conn.execute(
        "INSERT INTO pbt_segments (trial_id, segment, sweep_id, attempt, start_step, end_step, params, from_trial_id,"
        " from_step) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (s.trial_id, s.segment, s.sweep_id, s.attempt, s.start_step, s.end_step, Jsonb(s.params), s.from_trial_id,
         s.from_step))


def copies_to_do(conn: Conn, sweep_id: str | None) -> list[Row]:
    """The exploit copies not done of pending trials (of one sweep, or all): ``trial_id``, ``segment``,
    ``sweep_id``, ``from_trial_id`` and ``keep_all`` (the spec keeps every checkpoint)."""
    return conn.execute(
        "SELECT p.trial_id, p.segment, p.sweep_id, p.from_trial_id,"
        " s.spec->'checkpoints'->>'keep' IS NOT DISTINCT FROM 'all' AS keep_all FROM pbt_segments p"
        " JOIN trials t ON t.trial_id = p.trial_id JOIN sweeps s ON s.sweep_id = p.sweep_id"
        " WHERE p.from_trial_id IS NOT NULL AND p.copied_at IS NULL AND t.state = 'pending'"
        + (" AND p.sweep_id = %s" if sweep_id else "") + " ORDER BY p.trial_id, p.segment",
        (sweep_id,) if sweep_id else ()).fetchall()


def mark_copied(conn: Conn, trial_id: str, segment: int, step: int | None, note: str | None) -> None:
    conn.execute("UPDATE pbt_segments SET copied_at = now(), from_step = %s, copy_note = %s"
                 " WHERE trial_id = %s AND segment = %s AND copied_at IS NULL", (step, note, trial_id, segment))


def newest_checkpoints(conn: Conn, trial_ids: list[str]) -> list[Row]:
    return conn.execute(
        "SELECT DISTINCT ON (trial_id) trial_id, sweep_id, body->>'uri' AS uri FROM trial_events"
        " WHERE kind = 'trial.checkpoint' AND trial_id = ANY(%s)"
        " ORDER BY trial_id, (body->>'step')::numeric DESC, recorded_at DESC", (trial_ids,)).fetchall()
