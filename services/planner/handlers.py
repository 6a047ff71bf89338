"""Planner handlers: ``(delivery, deps)`` functions that tests call directly.

Exactly-once effects on at-least-once delivery: a spec is written ``ON
CONFLICT DO NOTHING`` on its sweep id; new trials are written ``pending`` in
the decision's transaction and published after the commit (:mod:`.outbox`);
every trial event is decided under its sweep's row lock, fenced by attempt
and run, and acked after the commit (:mod:`.events`); a cancelled sweep stays
cancelled and an extension names the spec version it extends. This module
only decodes, checks the sender, dispatches and sends what the application
(:mod:`.commands`, :func:`.service.on_events`) returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spotsweep.services.planner import commands
from spotsweep.services.planner.bodies import REJECTED, Submission, UndecodableSubmission, safe_name, sweep_command
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.effects import Effects, send
from spotsweep.services.planner.outbox import publish_pending
from spotsweep.services.planner.policy import sender_problem
from spotsweep.services.planner.service import on_events
from spotsweep.services.planner.untrusted import bare
from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Delivery
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.limits import cap_text
from spotsweep.shared.messages import decode, encode, unpack

__all__ = ["PlannerDeps", "handle_event", "handle_events", "handle_sweep_message", "publish_pending"]

_log = log.get("spotsweep.planner")

# What each command of the sweeps queue does, by its kind (a new command is a row here and a function in .commands).
_COMMANDS: dict[str, Callable[[PlannerDeps, Any], Effects]] = {
    Submission.kind: commands.submit,
    "sweep.cancel": commands.cancel,
    "sweep.extend": commands.extend,
}


def handle_sweep_message(delivery: Delivery, deps: PlannerDeps) -> None:
    """A command about a sweep (:func:`.bodies.sweep_command`), run, its effects sent, then acked.

    A bad id or an undecodable body raises :class:`DecodeError` (dead-lettered);
    a spec that cannot be accepted, or a sender not among the policy's
    submitters, records the sweep ``rejected`` with the reason, so whoever
    waits on it sees it end (a refused cancel or extend is dead-lettered)."""
    refused = sender_problem(deps.policy, getattr(delivery, "user_id", None))
    try:
        command = sweep_command(delivery.headers, delivery.message_id, delivery.body)
    except UndecodableSubmission as e:
        if refused is not None:
            raise PermanentError(refused) from e
        if e.sweep_id is not None:  # someone may wait on it: say why it never ran
            commands.reject(deps, e.sweep_id, REJECTED, str(e))
        raise
    with log.bound(sweep_id=command.sweep_id):
        if refused is None:
            effects = _COMMANDS[command.kind](deps, command)
        elif isinstance(command, Submission):
            effects = commands.reject(deps, command.sweep_id, safe_name(command.name) or command.sweep_id, refused)
        else:
            raise PermanentError(f"{command.kind} of {command.sweep_id}: {refused}")
        send(deps, effects)
    delivery.ack()


def handle_event(delivery: Delivery, deps: PlannerDeps) -> None:
    """One trial event (see :func:`handle_events`), acked once its effects are committed and sent."""
    handle_events([delivery], deps)
    delivery.ack()


def handle_events(deliveries: Sequence[Delivery], deps: PlannerDeps) -> None:
    """A batch of trial events: record each, retry, promote, prune or finish its
    trial, then launch more. One transaction per sweep in the batch (the events
    in delivery order, the sweep locked once, one top-up at the end), then what
    must be sent: stops, re-broadcast cancels, the outbox. Raises on an
    undecodable message (the batching wrapper isolates and dead-letters it);
    the caller acks the batch after this returns."""
    by_sweep: dict[str, list[Any]] = {}
    bodies: dict[str, bytes] = {}
    over: set[str] = set()  # starts that came inside their run's end
    for d in deliveries:
        event = decode(d.body)
        kind = getattr(event, "kind", None)  # every message model has one; Envelope itself does not say so
        if kind not in topology.PLANNER_KINDS:  # routed here by mistake (a hand-made binding): said, acked
            _log.warning("event of a kind the planner does not decide: acked and not journaled", kind=kind,
                         message_id=event.message_id)
        else:
            # A run shorter than one poll sends its start inside its end: it is
            # decided and journaled as if it had come on its own, just before.
            for one in unpack(event):
                by_sweep.setdefault(event.sweep_id, []).append(one)
                bodies[one.message_id] = d.body if one is event else encode(one)
                if one is not event:
                    over.add(one.message_id)
    for sweep_id, events in by_sweep.items():
        try:
            send(deps, on_events(deps, sweep_id, events, bodies, over))
        except RetryableError:
            raise
        except Exception as e:
            # A trial's end is always recorded: without the values the
            # database (or a decision on them) refused, with the reason. Only
            # for a message alone: in a batch, the batching wrapper first
            # splits it, so that no other trial's end loses its values.
            reason = cap_text(str(e) or type(e).__name__, 500)
            stripped = [bare(ev, reason) for ev in events]
            if len(deliveries) > 1 or all(a is b for a, b in zip(stripped, events)):
                raise
            _log.error("trial ends recorded without their final values", sweep_id=sweep_id, reason=reason)
            bodies.update((ev.message_id, encode(ev)) for ev, old in zip(stripped, events) if ev is not old)
            send(deps, on_events(deps, sweep_id, stripped, bodies, over))
