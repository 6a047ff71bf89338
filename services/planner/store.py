"""The planner's SQL: sweeps and trials are written only through here.

Every function takes an open connection inside the caller's transaction, so
a decision and its effects commit together or not at all.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json, Jsonb

from spotsweep.services.planner.decide import RetryPolicy, SweepState, TrialUpdate, TrialView
from spotsweep.shared.db import Conn, Row
from spotsweep.shared.messages import json_safe
from spotsweep.shared.states import TrialState



def trial_id_for(sweep_id: str, index: int) -> str:
    """Deterministic, so re-inserting a launched trial is a no-op."""
    return f"{sweep_id}.{index}"


def insert_sweep(conn: Conn, sweep_id: str, spec: dict[str, Any], name: str, total: int, priority: int) -> bool:
    cur = conn.execute(
        "INSERT INTO sweeps (sweep_id, name, spec, state, total_trials, priority) VALUES (%s, %s, %s, 'running', %s, %s)"
        " ON CONFLICT (sweep_id) DO NOTHING",
        (sweep_id, name, Json(spec), total, priority),
    )
    return cur.rowcount == 1


def fill_tombstone(conn: Conn, sweep_id: str, spec: dict[str, Any], name: str, total: int) -> None:
    """Record the spec of a sweep that was cancelled before it arrived (for reports)."""
    conn.execute(
        "UPDATE sweeps SET spec = %s, name = %s, total_trials = %s WHERE sweep_id = %s AND spec IS NULL AND state = 'cancelled'",
        (Json(spec), name, total, sweep_id),
    )


def insert_rejected(conn: Conn, sweep_id: str, name: str, error: str) -> None:
    conn.execute(
        "INSERT INTO sweeps (sweep_id, name, state, error, finished_at) VALUES (%s, %s, 'rejected', %s, now())"
        " ON CONFLICT (sweep_id) DO NOTHING",
        (sweep_id, name, error),
    )


def lock_sweep(conn: Conn, sweep_id: str) -> Row | None:
    """The sweep row, locked: serialises every decision about one sweep."""
    return conn.execute("SELECT * FROM sweeps WHERE sweep_id = %s FOR UPDATE", (sweep_id,)).fetchone()


def in_flight(conn: Conn, sweep_id: str) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM trials WHERE sweep_id = %s AND state IN ('pending', 'queued', 'running')", (sweep_id,)
    ).fetchone()
    return int(row["n"]) if row else 0


def sweep_state(conn: Conn, sweep: Row, max_concurrent: int, policy: RetryPolicy) -> SweepState:
    return SweepState(
        max_concurrent=max_concurrent,
        total_trials=int(sweep["total_trials"]),
        next_index=int(sweep["next_index"]),
        in_flight=in_flight(conn, sweep["sweep_id"]),
        max_failures=policy.max_failures,
        active=sweep["state"] == "running",
        policy=policy,
    )


def get_trial(conn: Conn, trial_id: str) -> tuple[Row, TrialView] | None:
    row = conn.execute("SELECT * FROM trials WHERE trial_id = %s FOR UPDATE", (trial_id,)).fetchone()
    if row is None:
        return None
    view = TrialView(TrialState(row["state"]), row["attempt"], row["failures"], row["preemptions"], row["run_id"],
                     dict(row["params"]))
    return row, view


def insert_trials(conn: Conn, sweep_id: str, first_index: int, trials: list[tuple[str, dict[str, Any]]]) -> None:
    """``trials``: (trial_name, params) for indexes ``first_index...``; advances the cursor."""
    if not trials:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state) VALUES (%s, %s, %s, %s, %s, 'pending')"
            " ON CONFLICT DO NOTHING",
            [(trial_id_for(sweep_id, first_index + i), sweep_id, first_index + i, name, Jsonb(p)) for i, (name, p) in enumerate(trials)],
        )
    conn.execute("UPDATE sweeps SET next_index = %s WHERE sweep_id = %s", (first_index + len(trials), sweep_id))


def apply_update(conn: Conn, trial_id: str, u: TrialUpdate) -> None:
    conn.execute(
        "UPDATE trials SET state = %s, attempt = %s, failures = %s, preemptions = %s,"
        " metrics = metrics || COALESCE(%s, '{}'::jsonb),"
        # a completed trial keeps no error from an earlier, failed attempt
        " error = CASE WHEN %s = 'completed' THEN NULL ELSE COALESCE(%s, error) END, agent = COALESCE(%s, agent),"
        " started_at = CASE WHEN %s THEN COALESCE(started_at, now()) ELSE started_at END,"
        " finished_at = CASE WHEN %s THEN now() ELSE finished_at END,"
        " run_id = COALESCE(%s, run_id), losses = COALESCE(%s, losses), params = COALESCE(%s, params),"
        " run_seconds = run_seconds + %s"
        " WHERE trial_id = %s",
        (
            u.state.value, u.attempt, u.failures, u.preemptions,
            Jsonb(json_safe(u.metrics)) if u.metrics is not None else None, u.state.value, u.error, u.agent,
            u.started, u.finished, u.run_id, u.losses, Jsonb(u.params) if u.params is not None else None,
            u.add_seconds, trial_id,
        ),
    )


def finish_sweep(conn: Conn, sweep_id: str, state: str = "completed") -> None:
    conn.execute(
        "UPDATE sweeps SET state = %s, finished_at = now() WHERE sweep_id = %s AND state = 'running'", (state, sweep_id)
    )


def cancel_sweep(conn: Conn, sweep_id: str) -> int:
    """Cancel the sweep and every trial not yet ended; returns trials cancelled.

    A cancel can overtake its spec (it is posted at top priority): then a
    tombstone row is left so that the spec, when it comes, starts nothing.
    """
    conn.execute(
        "INSERT INTO sweeps (sweep_id, name, state, error, finished_at)"
        " VALUES (%s, '?', 'cancelled', 'cancelled before the planner saw its spec', now()) ON CONFLICT DO NOTHING",
        (sweep_id,),
    )
    conn.execute(
        "UPDATE sweeps SET state = 'cancelled', finished_at = now() WHERE sweep_id = %s AND state = 'running'", (sweep_id,)
    )
    cur = conn.execute(
        "UPDATE trials SET state = 'cancelled', finished_at = now(), error = 'cancelled by user'"
        " WHERE sweep_id = %s AND state IN ('pending', 'queued', 'running')",
        (sweep_id,),
    )
    return cur.rowcount


def pending_trials(conn: Conn, sweep_id: str | None, limit: int = 100) -> list[Row]:
    """Trials written but not yet confirmed on the broker (the outbox), locked.

    SKIP LOCKED: two planners never publish the same row at the same time.
    """
    where = "t.state = 'pending'" + (" AND t.sweep_id = %s" if sweep_id else "")
    args: tuple[Any, ...] = (sweep_id, limit) if sweep_id else (limit,)
    return conn.execute(
        f"SELECT t.*, s.spec FROM trials t JOIN sweeps s USING (sweep_id) WHERE {where}"
        " ORDER BY t.sweep_id, t.idx LIMIT %s FOR UPDATE OF t SKIP LOCKED",
        args,
    ).fetchall()


def mark_queued(conn: Conn, trial_ids: list[str]) -> None:
    conn.execute("UPDATE trials SET state = 'queued' WHERE trial_id = ANY(%s) AND state = 'pending'", (trial_ids,))
