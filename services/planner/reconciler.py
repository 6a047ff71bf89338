"""The I/O around :mod:`.reconcile`: read the database, ask the broker, put the missing attempts back in the outbox.

Runs on its own thread, at every (re)connection and every ``every`` seconds
(:meth:`Reconciler.attach`). A missing attempt goes back to ``pending`` with
the same attempt number, only if its row is still as it was read (locked),
so the outbox republishes it under the message id first published
(``trial_id#attempt``); a ``running`` one journals a ``trial.lost`` for its
run, as :func:`~.orphans.requeue_orphans` does. Errors (the broker gone
again) are left to the next round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.orphans import lost_run
from spotsweep.services.planner.outbox import publish_pending
from spotsweep.services.planner.ports import PgSweeps
from spotsweep.services.planner.reconcile import GRACE_S, Held, Key, QueueFacts, decide
from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db.journal import journal


_log = log.get("spotsweep.planner")
EVERY_S = 10.0
NOTE = "republished: the broker no longer held this attempt (PostgreSQL still did)"


def held_trials(deps: PlannerDeps) -> list[Held]:
    """The trials PostgreSQL holds as waiting on the broker (queued or running), with their class."""
    with deps.db.transaction() as conn:
        rows = conn.execute(
            "SELECT t.trial_id, t.sweep_id, t.attempt, t.idx, t.state, s.spec_version FROM trials t"
            " JOIN sweeps s USING (sweep_id) WHERE t.state IN ('queued', 'running')").fetchall()
        specs = {(r["sweep_id"], r["spec_version"]) for r in rows}
        classes = {key: deps.stored_spec(PgSweeps(conn), *key)[0].resources.resource_class for key in specs}
    return [Held(r["trial_id"], int(r["attempt"]), classes[(r["sweep_id"], r["spec_version"])],
                 running=r["state"] == "running", idx=int(r["idx"])) for r in rows]


def queue_facts(broker: Broker, classes: set[str]) -> dict[str, QueueFacts]:
    """Each class's trials queue from passive declares (``ready`` None: the queue does not exist)."""
    out = {}
    for cls in classes:
        queue = topology.trials_queue(cls)
        ready, consumers = broker.queue_depth(queue), broker.consumers(queue)
        out[cls] = QueueFacts(ready=None if ready is None or consumers is None else ready, consumers=consumers or 0)
    return out


def requeue(deps: PlannerDeps, missing: Sequence[Held]) -> int:
    """Put ``missing`` back in the outbox, each only if its row is unchanged; how many were."""
    want = {h.trial_id: h for h in missing}
    with deps.db.transaction() as conn:
        rows = conn.execute("SELECT trial_id, sweep_id, state, attempt, agent, run_id FROM trials"
                            " WHERE trial_id = ANY(%s) ORDER BY trial_id FOR UPDATE", (list(want),)).fetchall()
        same = [r for r in rows if int(r["attempt"]) == want[r["trial_id"]].attempt
                and r["state"] == ("running" if want[r["trial_id"]].running else "queued")]
        journal(conn, [lost_run(r["sweep_id"], r, NOTE) for r in same if r["state"] == "running"])
        conn.execute("UPDATE trials SET state = 'pending' WHERE trial_id = ANY(%s)", ([r["trial_id"] for r in same],))
    return len(same)


class Reconciler:
    """Reconciles after each connection and periodically; remembers suspects across connections."""

    def __init__(self, every: float = EVERY_S, grace: float = GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.grace, self.clock = every, grace, clock
        self.suspects: dict[Key, float] = {}

    def once(self, deps: PlannerDeps) -> int:
        """One round: returns how many attempts were published again."""
        held = held_trials(deps)  # first: an attempt queued after this read is not counted against the queue
        queues = queue_facts(deps.broker, {h.resource_class for h in held})
        verdict = decide(held, queues, self.suspects, self.clock(), self.grace)
        self.suspects = verdict.suspects
        if not verdict.republish:
            return 0
        # A queue found gone is declared again: the outbox declares a class only once per connection.
        deps.broker.declare([topology.trial_queue_spec(c) for c, f in sorted(queues.items()) if f.ready is None])
        requeued = requeue(deps, verdict.republish)
        publish_pending(deps)
        _log.warning("republished trials the broker no longer held", trials=requeued,
                     certain=verdict.certain, suspected=len(verdict.republish) - verdict.certain)
        return requeued

    def attach(self, deps: PlannerDeps) -> Callable[[], None]:
        """Start the rounds for this connection's ``deps``; returns the stop, for its cleanup."""
        stop = threading.Event()

        def loop() -> None:
            while True:
                try:
                    self.once(deps)
                except Exception as e:  # the broker or database away: the next round tries again
                    _log.warning("reconciliation with the broker failed", error=f"{type(e).__name__}: {e}")
                if stop.wait(self.every):
                    return

        thread = threading.Thread(target=loop, name="planner-reconcile", daemon=True)
        thread.start()

        def close() -> None:
            stop.set()
            thread.join(timeout=10)

        return close
