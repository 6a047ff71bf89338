"""The planner's commands on a sweep (submit, cancel, extend), each in one unit of work.

Each returns the :class:`.effects.Effects` to send once its transaction has
committed (:func:`.effects.send`). All are idempotent on redelivery: a spec is
inserted once by its sweep id, a cancelled sweep stays cancelled, and an
extension names the spec version it extends.
"""

from __future__ import annotations

from typing import Any

from spotsweep.services.planner.bodies import Submission, safe_name
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.effects import Effects
from spotsweep.services.planner.extend import extended
from spotsweep.services.planner.launch import top_up
from spotsweep.services.planner.policy import Policy, command_problem
from spotsweep.services.planner.search import Search
from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError, RetryableError, SpecError
from spotsweep.shared.limits import MAX_TOTAL_TRIALS, cap_text
from spotsweep.shared.messages import CancelSweep, ExtendSweep
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec, parse_spec

_log = log.get("spotsweep.planner")


def submit(deps: PlannerDeps, submitted: Submission) -> Effects:
    """Accept a spec and launch its first trials, or record the sweep as rejected with the reason."""
    sweep_id = submitted.sweep_id
    try:
        spec, search = accepted(submitted.spec, deps.policy)
    except RetryableError:
        raise
    except Exception as e:  # a spec error, or a search that cannot be built from it
        return reject(deps, sweep_id, safe_name(submitted.name) or sweep_id, str(e) or type(e).__name__)
    try:
        start(deps, sweep_id, spec, search)
    except PermanentError as e:  # the database refused it: rolled back, recorded as rejected instead
        return reject(deps, sweep_id, spec.name, f"the planner could not store the sweep: {e}")
    return Effects(sweep_id)  # the outbox, drained on a redelivery too (an earlier try may have committed only)


def accepted(data: Any, policy: Policy) -> tuple[SweepSpec, Search]:
    """The spec and its search, or the error that refuses them (the policy's command check among them)."""
    spec = parse_spec(data)
    if (problem := command_problem(policy, spec.command, spec.env)) is not None:
        raise SpecError([("command", problem)])
    total = total_trials(spec)
    if total > MAX_TOTAL_TRIALS:  # parse_spec refuses these too; the database's bigint is the planner's own bound
        raise SpecError([("space", f"the sweep would have {total:.3g} trials; at most 2^53 can be counted")])
    return spec, Search(spec)


def start(deps: PlannerDeps, sweep_id: str, spec: SweepSpec, search: Search) -> None:
    """Insert the sweep and launch its first trials; a sweep whose cancel came first is only recorded."""
    raw, total = spec.to_json_dict(), total_trials(spec)
    with deps.unit() as uow:
        if not uow.sweeps.insert(sweep_id, raw, spec.name, total, spec.priority):
            uow.sweeps.fill_tombstone(sweep_id, raw, spec.name, total)  # a redelivery, or an old planner's tombstone
        elif uow.sweeps.take_early_cancel(sweep_id):
            uow.sweeps.cancel(sweep_id)
            _log.info("sweep cancelled before it started (the cancel came first)", name=spec.name)
        else:
            _log.info("sweep accepted", name=spec.name, trials=total)
            top_up(uow, sweep_id, spec, search, deps.window)


def reject(deps: PlannerDeps, sweep_id: str, name: str, error: str) -> Effects:
    """Record a sweep that will never run, so that whoever waits on it sees it end, and why."""
    _log.warning("spec rejected", sweep_id=sweep_id, error=cap_text(error, 500))
    with deps.unit() as uow:
        uow.sweeps.insert_rejected(sweep_id, name, error)
    return Effects(sweep_id, publish=False)


def extend(deps: PlannerDeps, command: ExtendSweep) -> Effects:
    """Extend spec version ``command.version`` by more trials and/or new budget caps, and launch what now may run."""
    sweep_id, version = command.sweep_id, command.version
    with deps.unit() as uow:
        sweep = uow.sweeps.lock(sweep_id)
        if sweep is None or not sweep["has_spec"] or sweep["state"] not in ("running", "completed"):
            _log.warning("extend refused: no running or completed sweep of that id", state=sweep and sweep["state"])
            return Effects(sweep_id, publish=False)
        if sweep["spec_version"] != version:
            _log.info("extension already applied (or the spec changed since)", version=version)
            return Effects(sweep_id)  # a redelivery: what the first try committed is still sent
        try:
            spec = extended(deps.stored_spec(uow.sweeps, sweep_id, version)[0], command.trials, dict(command.budget))
        except SpecError as e:
            _log.warning("extend refused", error=str(e))
            return Effects(sweep_id, publish=False)
        raw, total = spec.to_json_dict(), total_trials(spec)
        uow.sweeps.extend(sweep_id, raw, total)
        _log.info("sweep extended", trials=total, budget=dict(command.budget) or None)
        top_up(uow, sweep_id, spec, deps.search(sweep_id, raw, version + 1), deps.window)
    return Effects(sweep_id)


def cancel(deps: PlannerDeps, command: CancelSweep) -> Effects:
    """Cancel a known sweep (again: idempotent) and tell every agent. An unknown
    id leaves no sweep row: it is remembered a while, hidden, in case its
    submission is still queued behind the cancel (which is posted at top priority)."""
    sweep_id = command.sweep_id
    with deps.unit() as uow:
        n = uow.sweeps.cancel(sweep_id)
        if n is None:
            kept = uow.sweeps.remember_early_cancel(sweep_id)
            _log.warning("cancel of an unknown sweep", kept_for_its_submission=kept)
            return Effects(sweep_id, publish=False)
    _log.info("sweep cancelled", trials=n)
    return Effects(sweep_id, cancel=True, publish=False)
