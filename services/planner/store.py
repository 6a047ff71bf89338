"""The planner's SQL: sweeps and trials are written only through here.

Every function takes an open connection inside the caller's transaction, so
a decision and its effects commit together or not at all; the contract of
one that a repository method binds is that method's (:mod:`.ports`).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json, Jsonb

from spotsweep.services.planner.decide import RetryPolicy, SweepState, TrialUpdate, TrialView
from spotsweep.services.planner.outcome import Outcomes
from spotsweep.services.planner.untrusted import FLAGS, WARNINGS, pg_text
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
    """Record the spec of a sweep cancelled before it arrived, by a planner
    before schema version 3 (which left a row without a spec; see :func:`take_early_cancel`)."""
    conn.execute(
        "UPDATE sweeps SET spec = %s, name = %s, total_trials = %s WHERE sweep_id = %s AND spec IS NULL AND state = 'cancelled'",
        (Json(spec), name, total, sweep_id),
    )


def insert_rejected(conn: Conn, sweep_id: str, name: str, error: str) -> None:
    conn.execute(
        "INSERT INTO sweeps (sweep_id, name, state, error, finished_at) VALUES (%s, %s, 'rejected', %s, now())"
        " ON CONFLICT (sweep_id) DO NOTHING",
        (sweep_id, name, pg_text(error)),
    )


# The sweep row without its spec, which every batch of events would otherwise
# decode again: the planner keeps parsed specs by (sweep, version).
_NO_SPEC = ("sweep_id, name, state, error, total_trials, next_index, priority, created_at, finished_at, search_attrs,"
            " note, spec_version, spec IS NOT NULL AS has_spec")


def get_sweep(conn: Conn, sweep_id: str) -> Row | None:
    """The sweep row, its spec included, as this transaction sees it."""
    return conn.execute("SELECT * FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()


def lock_sweep(conn: Conn, sweep_id: str) -> Row | None:
    """The sweep row without its spec, locked: serialises every decision about one sweep."""
    return conn.execute(f"SELECT {_NO_SPEC} FROM sweeps WHERE sweep_id = %s FOR UPDATE", (sweep_id,)).fetchone()


def in_flight(conn: Conn, sweep_id: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*) AS n, count(*) FILTER (WHERE state IN ('pending', 'queued')) AS waiting"
        " FROM trials WHERE sweep_id = %s AND state IN ('pending', 'queued', 'running')", (sweep_id,)
    ).fetchone()
    return (int(row["n"]), int(row["waiting"])) if row else (0, 0)


def sweep_state(counts: tuple[int, int], sweep: Row, max_concurrent: int, policy: RetryPolicy,
                window: int | None = None) -> SweepState:
    """The sweep's state for :func:`~.decide.fill`; ``counts``: :func:`in_flight`'s."""
    busy, waiting = counts
    return SweepState(
        max_concurrent=max_concurrent,
        total_trials=int(sweep["total_trials"]),
        next_index=int(sweep["next_index"]),
        in_flight=busy,
        max_failures=policy.max_failures,
        active=sweep["state"] == "running",
        policy=policy,
        waiting=waiting,
        window=window,
    )


def view_of(row: Row) -> TrialView:
    """What a decision reads of a trial row."""
    return TrialView(TrialState(row["state"]), row["attempt"], row["failures"], row["preemptions"], row["run_id"],
                     dict(row["params"]), row.get("error"), row.get("last_step"))


# What deciding an event reads of a trial: not its curve or sampler state
# (jsonb that may be large, decoded on every read), nor its timestamps.
_DECIDED = ("trial_id, sweep_id, idx, trial_name, params, state, attempt, failures, preemptions, metrics, agent, losses,"
            " run_seconds, run_id, rungs, error, last_step")


def get_trials(conn: Conn, trial_ids: list[str]) -> dict[str, tuple[Row, TrialView]]:
    """Several trials, locked, in one round trip (a batch of events); missing ids are left out."""
    rows = conn.execute(f"SELECT {_DECIDED} FROM trials WHERE trial_id = ANY(%s) ORDER BY trial_id FOR UPDATE",
                        (list(set(trial_ids)),)).fetchall()
    return {row["trial_id"]: (row, view_of(row)) for row in rows}


def get_spec(conn: Conn, sweep_id: str) -> tuple[dict[str, Any], int] | None:
    """A sweep's spec and its version (what the outbox renders trial messages from, on a cache miss)."""
    row = conn.execute("SELECT spec, spec_version FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()
    return None if row is None or row["spec"] is None else (row["spec"], int(row["spec_version"]))


NewTrial = tuple[int, str, dict[str, Any], dict[str, Any]]  # index, name, params, search attrs


def insert_trials(conn: Conn, sweep_id: str, trials: list[NewTrial], advance: bool = True) -> None:
    if not trials:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, search_attrs, state)"
            " VALUES (%s, %s, %s, %s, %s, %s, 'pending') ON CONFLICT DO NOTHING",
            [(trial_id_for(sweep_id, i), sweep_id, i, name, Jsonb(p), Jsonb(attrs)) for i, name, p, attrs in trials],
        )
    if advance:
        conn.execute("UPDATE sweeps SET next_index = %s WHERE sweep_id = %s", (trials[-1][0] + 1, sweep_id))


def extend_sweep(conn: Conn, sweep_id: str, spec: dict[str, Any], total: int) -> None:
    conn.execute(
        "UPDATE sweeps SET spec = %s, total_trials = %s, spec_version = spec_version + 1, note = NULL,"
        " state = 'running', finished_at = NULL WHERE sweep_id = %s",
        (Json(spec), total, sweep_id),
    )


def cap_sweep(conn: Conn, sweep_id: str, total: int, note: str) -> None:
    """Launch no more: a budget cap was reached. The sweep ends once its trials in flight do."""
    conn.execute("UPDATE sweeps SET total_trials = %s, note = %s WHERE sweep_id = %s", (total, note, sweep_id))


def set_study_attrs(conn: Conn, sweep_id: str, attrs: dict[str, Any]) -> None:
    conn.execute("UPDATE sweeps SET search_attrs = %s WHERE sweep_id = %s", (Json(attrs), sweep_id))


def merge_curve(conn: Conn, trial_id: str, points: list[tuple[int, float]]) -> None:
    """Add a running trial's objective points to its curve (early stopping's history)."""
    curve = {str(step): value for step, value in points}
    conn.execute("UPDATE trials SET curve = curve || %s, last_step = greatest(last_step, %s) WHERE trial_id = %s",
                 (Jsonb(json_safe(curve)), max((step for step, _ in points), default=None), trial_id))


def apply_update(conn: Conn, trial_id: str, u: TrialUpdate) -> None:
    conn.execute(
        "UPDATE trials SET state = %s, attempt = %s, failures = %s, preemptions = %s,"
        " metrics = metrics || COALESCE(%s, '{}'::jsonb),"
        # a completed trial keeps no error from an earlier, failed attempt
        " error = CASE WHEN %s = 'completed' THEN NULL ELSE COALESCE(%s, error) END, agent = COALESCE(%s, agent),"
        " started_at = CASE WHEN %s THEN COALESCE(started_at, now()) ELSE started_at END,"
        " finished_at = CASE WHEN %s THEN now() ELSE finished_at END,"
        " run_id = COALESCE(%s, run_id), losses = COALESCE(%s, losses), params = COALESCE(%s, params),"
        " run_seconds = run_seconds + %s, rungs = rungs || COALESCE(%s, '{}'::jsonb),"
        " run_started_at = CASE WHEN %s THEN now() ELSE run_started_at END, last_step = greatest(last_step, %s),"
        f" flags = {_MERGED.format(column='flags', most=FLAGS)}, warnings = {_MERGED.format(column='warnings', most=WARNINGS)}"
        " WHERE trial_id = %s",
        (
            u.state.value, u.attempt, u.failures, u.preemptions,
            Jsonb(json_safe(u.metrics)) if u.metrics is not None else None, u.state.value,
            None if u.error is None else pg_text(u.error), u.agent,
            u.started, u.finished, u.run_id, u.losses, Jsonb(u.params) if u.params is not None else None,
            u.add_seconds, Jsonb(json_safe({str(k): v for k, v in u.rungs.items()})) if u.rungs else None,
            u.started, u.last_step, *_twice(u.flags), *_twice(u.warnings), trial_id,
        ),
    )


# An array column merged with new items: the old ones first, each item once, at most ``most``.
_MERGED = ("CASE WHEN %s::text[] IS NULL THEN {column} ELSE ARRAY(SELECT x FROM unnest({column} || %s::text[])"
           " WITH ORDINALITY AS u(x, o) GROUP BY x ORDER BY min(o) LIMIT {most}) END")


def _twice(items: tuple[str, ...] | None) -> tuple[list[str] | None, list[str] | None]:
    value = None if items is None else list(items)
    return value, value


def updated(row: Row, u: TrialUpdate) -> tuple[Row, TrialView]:
    """The trial as :func:`apply_update` leaves it (the columns decisions read),
    without reading it back: a batch with several events of one trial (its
    start and its end, for a short run) decides each on the one before's effect."""
    new = dict(row)
    new.update(state=u.state.value, attempt=u.attempt, failures=u.failures, preemptions=u.preemptions)
    if u.metrics is not None:
        new["metrics"] = {**(row["metrics"] or {}), **json_safe(u.metrics)}
    for column in ("run_id", "losses", "agent", "params"):
        if getattr(u, column) is not None:
            new[column] = getattr(u, column)
    new["run_seconds"] = float(row.get("run_seconds") or 0.0) + u.add_seconds
    if u.rungs:
        new["rungs"] = {**(row.get("rungs") or {}), **json_safe({str(k): v for k, v in u.rungs.items()})}
    if u.last_step is not None:
        new["last_step"] = max(int(row.get("last_step") or 0), u.last_step)
    if u.state == TrialState.COMPLETED or u.error is not None:  # as apply_update: completing clears the error
        new["error"] = None if u.state == TrialState.COMPLETED else pg_text(u.error or "")
    return new, view_of(new)


def finish_sweep(conn: Conn, sweep_id: str, state: str = "completed", error: str | None = None) -> None:
    conn.execute(
        "UPDATE sweeps SET state = %s, finished_at = now(), error = COALESCE(%s, error) WHERE sweep_id = %s AND state = 'running'",
        (state, None if error is None else pg_text(error), sweep_id),
    )


def outcomes(conn: Conn, sweep_id: str) -> Outcomes:
    counts = {r["state"]: int(r["n"]) for r in conn.execute(
        "SELECT state, count(*) AS n FROM trials WHERE sweep_id = %s AND idx >= 0 GROUP BY state", (sweep_id,))}
    first = conn.execute("SELECT error FROM trials WHERE sweep_id = %s AND idx >= 0 AND state = 'failed'"
                         " ORDER BY idx LIMIT 1", (sweep_id,)).fetchone()
    return Outcomes(counts, first["error"] if first else None)


def fail_sweep(conn: Conn, sweep_id: str, error: str) -> None:
    """End the sweep as failed (its smoke stage failed): trials in flight are cancelled."""
    error = pg_text(error)
    finish_sweep(conn, sweep_id, "failed", error)
    conn.execute(
        "UPDATE trials SET state = 'cancelled', finished_at = now(), error = 'the sweep failed: ' || %s"
        " WHERE sweep_id = %s AND state IN ('pending', 'queued', 'running', 'paused')",
        (error, sweep_id),
    )


def cancel_sweep(conn: Conn, sweep_id: str) -> int | None:
    cur = conn.execute(
        "UPDATE sweeps SET state = CASE WHEN state = 'running' THEN 'cancelled' ELSE state END,"
        " finished_at = CASE WHEN state = 'running' THEN now() ELSE finished_at END WHERE sweep_id = %s",
        (sweep_id,),
    )
    if cur.rowcount == 0:
        return None
    cur = conn.execute(
        "UPDATE trials SET state = 'cancelled', finished_at = now(), error = 'cancelled by user'"
        " WHERE sweep_id = %s AND state IN ('pending', 'queued', 'running', 'paused')",
        (sweep_id,),
    )
    return cur.rowcount


# A cancel can overtake its spec (it is posted at top priority). It is kept
# here, not as a sweep row (which every ``status`` would list for ever): a day
# at most, and at most this many at once, so a flood of made-up ids costs
# a bounded table nobody reads but the planner.
EARLY_CANCELS = 10_000


def remember_early_cancel(conn: Conn, sweep_id: str) -> bool:
    conn.execute("DELETE FROM early_cancels WHERE received_at < now() - interval '1 day'")
    cur = conn.execute(
        "INSERT INTO early_cancels (sweep_id) SELECT %s WHERE (SELECT count(*) FROM early_cancels) < %s"
        " ON CONFLICT DO NOTHING",
        (sweep_id, EARLY_CANCELS),
    )
    return cur.rowcount == 1


def take_early_cancel(conn: Conn, sweep_id: str) -> bool:
    cur = conn.execute("DELETE FROM early_cancels WHERE sweep_id = %s AND received_at >= now() - interval '1 day'",
                       (sweep_id,))
    return cur.rowcount > 0


PENDING_PAGE = 100  # outbox rows published per confirmed batch


def pending_trials(conn: Conn, sweep_id: str | None, limit: int = PENDING_PAGE) -> list[Row]:
    """Trials written but not yet confirmed on the broker (the outbox), locked.

    SKIP LOCKED: two planners never publish the same row at the same time.
    """
    where = "t.state = 'pending'" + (" AND t.sweep_id = %s" if sweep_id else "")
    # Not before PBT's exploit copy into its prefix is done (services/planner/exploit.py).
    where += (" AND NOT EXISTS (SELECT 1 FROM pbt_segments p WHERE p.trial_id = t.trial_id"
              " AND p.from_trial_id IS NOT NULL AND p.copied_at IS NULL)")
    args: tuple[Any, ...] = (sweep_id, limit) if sweep_id else (limit,)
    # The spec itself is not joined in: every row would carry (and decode) the
    # whole spec; the planner keeps parsed specs by (sweep, version) instead.
    return conn.execute(
        f"SELECT t.*, s.spec_version FROM trials t JOIN sweeps s USING (sweep_id) WHERE {where}"
        " ORDER BY t.sweep_id, t.idx LIMIT %s FOR UPDATE OF t SKIP LOCKED",
        args,
    ).fetchall()


def mark_queued(conn: Conn, trial_ids: list[str]) -> None:
    """Mark published trials ``queued``, committed without waiting for the disk.

    Losing this mark (PostgreSQL crashing within a fraction of a second, before
    any later commit flushed it) only leaves the trials ``pending``: they are
    published again and the second run of each is stopped as a duplicate, the
    outbox's documented window. Every later commit flushes it, as the log is
    written in order. Not waiting saves a disk flush on the planner's path
    between a trial's end and the next trial's start.
    """
    conn.execute("SET LOCAL synchronous_commit = off")
    conn.execute("UPDATE trials SET state = 'queued' WHERE trial_id = ANY(%s) AND state = 'pending'", (trial_ids,))
