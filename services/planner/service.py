"""The planner's application service: one sweep's trial events, decided in one unit of work.

What must be sent then (stops, a re-broadcast cancel, the outbox) comes back
as :class:`.effects.Effects`, which the caller sends after the commit.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from spotsweep.services.planner.breaker import broken
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.effects import Effects, stop_of
from spotsweep.services.planner.events import apply
from spotsweep.services.planner.launch import top_up
from spotsweep.services.planner.unit import UnitOfWork
from spotsweep.services.planner.untrusted import cleaned
from spotsweep.shared import log
from spotsweep.shared.messages import TrialFinished, TrialProgress, encode
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState

if TYPE_CHECKING:
    from spotsweep.services.planner.search import Search

_log = log.get("spotsweep.planner")


def on_events(deps: PlannerDeps, sweep_id: str, events: list[Any], bodies: dict[str, bytes],
              inside: Collection[str] = ()) -> Effects:
    """Decide ``events`` (all of sweep ``sweep_id``, in delivery order) and commit.

    ``bodies``: each event's bytes by message id, journaled as received.
    ``inside``: message ids of starts that came inside their run's end
    (schema v4): their run is over, so they stop nothing."""
    effects = Effects(sweep_id)
    with log.bound(sweep_id=sweep_id), deps.unit() as uow:
        sweep = uow.sweeps.lock(sweep_id)
        if sweep is None or not sweep["has_spec"]:
            _log.warning("events for an unknown sweep", events=len(events))
            return effects
        spec, search = deps.stored_spec(uow.sweeps, sweep_id, sweep["spec_version"])
        events = _cleaned(events, spec, bodies)
        uow.load([e.trial_id for e in events])
        with uow.pipeline():  # the updates go out without a round trip each; a read waits for what was sent before it
            failed = [_decide(uow, sweep, event, spec, search, effects, event.message_id in inside) for event in events]
            uow.trials.journal([e for e in events if not isinstance(e, TrialProgress)], bodies)  # with the decisions, once
        if any(f is not None for f in failed) and sweep["state"] == "running":
            _breaker(uow, sweep_id, spec, [f for f in failed if f is not None][-1], effects)
        topped = top_up(uow, sweep_id, spec, search, deps.window)
        if topped.failed is not None:
            effects.cancel = True
        if spec.checkpoints.keep != "all":
            effects.discard.extend(topped.pruned)  # they waited at a rung, their run over: no agent holds them
    return effects


def _decide(uow: UnitOfWork, sweep: Any, event: Any, spec: SweepSpec, search: Search, effects: Effects,
            inside: bool) -> str | None:
    """Decide one event; returns the error of a regular trial it failed for good (the sweep breaker's), else None."""
    with log.bound(trial_id=event.trial_id, attempt=event.attempt):
        found = uow.trial(event.trial_id)
        if found is None:
            _log.warning("event for an unknown trial", kind=event.kind)
            return None
        done = apply(uow, sweep, found[0], found[1], event, spec, search)
        update = done.decision.update
        failed = (update.error or "") if update is not None and update.state == TrialState.FAILED \
            and found[0]["idx"] >= 0 else None
        if inside:  # a run that sent its start with its end is over: nothing to stop or cancel
            return failed
        effects.cancel = effects.cancel or done.recancel
        stop = stop_of(sweep["sweep_id"], event.trial_id, done.decision)
        if stop is not None:
            effects.stops.append(stop)
        elif isinstance(event, TrialFinished) and update is not None \
                and update.state == TrialState.PRUNED and spec.checkpoints.keep != "all":
            # successive halving pruned it at its run's end (a run the planner stopped is cleaned by its agent)
            effects.discard.append(event.trial_id)
        return failed


def _breaker(uow: UnitOfWork, sweep_id: str, spec: SweepSpec, last_error: str, effects: Effects) -> None:
    """The sweep's own breaker (:mod:`.breaker`): a sweep that fails everywhere is stopped as
    a failed smoke stage stops it: failed with the reason, its trials cancelled, agents told."""
    reason = broken(uow.trials.outcomes(sweep_id).counts, last_error, spec.retries.max_failed_trials)
    if reason is None:
        return
    uow.sweeps.fail(sweep_id, reason)
    effects.cancel = True
    _log.warning("sweep stopped by its breaker", reason=reason)


def _cleaned(events: list[Any], spec: SweepSpec, bodies: dict[str, bytes]) -> list[Any]:
    """The events without what the database cannot take (:mod:`.untrusted`);
    a cleaned event is journaled as cleaned."""
    out = []
    for event in events:
        clean = cleaned(event, spec.limits)
        if clean is not event:
            _log.warning("event values dropped", trial_id=event.trial_id, kind=event.kind,
                         warnings=getattr(clean, "warnings", None))
            bodies[clean.message_id] = encode(clean)
        out.append(clean)
    return out
