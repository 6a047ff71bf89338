"""Trials orphaned by a broker that kept nothing: local mode's in-process broker.

RabbitMQ's queues are durable: a trial the planner marked ``queued`` stays on
its queue, and the run of a vanished agent comes back to the queue. Local
mode's broker lives in the ``spotsweep run`` process, so when that process
ends (a drained Ctrl-C, or kill -9) the messages of its ``queued`` trials are
gone, and after kill -9 its ``running`` trials have no run and no message.
:func:`requeue_orphans` puts both back in the outbox (``pending``, the same
attempt: the next run restores the trial's latest checkpoint, as a run
redelivered by RabbitMQ would), journals a ``trial.lost`` for each run that
died and counts it in the trial's ``losses`` (where a cluster's agent counts a
delivery lost with its agent; the next start, not a redelivery, keeps the
count: :func:`~.decide._started`), and the planner's outbox (:func:`~.outbox.publish_pending`) publishes
them again. Call it only while no process runs the sweep (``spotsweep
resume`` holds the sweep's lock) and never for a sweep served by RabbitMQ.
"""

from __future__ import annotations

from spotsweep.shared.db import Conn
from spotsweep.shared.db.journal import journal
from spotsweep.services.planner.untrusted import pg_text
from spotsweep.shared.messages import TrialLost
from spotsweep.shared.states import TrialState, check_transition


def lost_run(sweep_id: str, row: dict[str, object], reason: str) -> TrialLost:
    """The journal's record of a run that died with its process (its time is not known: not counted)."""
    return TrialLost(sweep_id=sweep_id, trial_id=str(row["trial_id"]), attempt=int(row["attempt"]),  # type: ignore[call-overload]
                     agent=str(row["agent"] or "local"), run_id=str(row["run_id"] or ""), reason=reason)


def requeue_orphans(conn: Conn, sweep_id: str, reason: str) -> tuple[int, int, int]:
    """Queued and running trials of ``sweep_id`` back to ``pending`` (same attempt), in the
    caller's transaction; returns how many of them had not started yet, were stopped by a
    drain (queued again after a run: they resume from their checkpoint), and were running."""
    rows = conn.execute(
        "SELECT trial_id, state, attempt, agent, run_id, started_at FROM trials WHERE sweep_id = %s"
        " AND state IN ('queued', 'running') ORDER BY idx FOR UPDATE", (sweep_id,)).fetchall()
    for row in rows:
        check_transition(TrialState(row["state"]), TrialState.PENDING)
    running = [r for r in rows if r["state"] == TrialState.RUNNING.value]
    stopped = sum(1 for r in rows if r["state"] == TrialState.QUEUED.value and r["started_at"] is not None)
    journal(conn, [lost_run(sweep_id, r, reason) for r in running])
    note = pg_text(reason)
    conn.execute(
        "UPDATE trials SET state = 'pending', error = CASE WHEN state = 'running' THEN %s ELSE error END,"
        " losses = losses + CASE WHEN state = 'running' THEN 1 ELSE 0 END"  # a lost run, as an agent counts one
        " WHERE sweep_id = %s AND state IN ('queued', 'running')", (note, sweep_id))
    return len(rows) - len(running) - stopped, stopped, len(running)
