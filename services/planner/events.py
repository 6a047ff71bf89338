"""One trial event, decided and applied inside the caller's transaction.

Lifecycle events go through :func:`~.decide.decide`, a completed run first
past successive halving (promote, prune or complete; a promotion the budget
caps refuse completes the trial at its rung). Progress events record the
objective's curve for early stopping, which may prune the trial. The caller
tops the sweep up once after a batch (:func:`~.launch.top_up`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from spotsweep.services.planner.decide import (
    Decision, RunEnd, SweepState, TrialView, counted_run, decide, live, prune, record_rungs,
)
from spotsweep.services.planner import exploit
from spotsweep.services.planner.launch import retry_policy
from spotsweep.services.planner.search import Action, Search, StepDecision
from spotsweep.services.planner.search.history import objective_values
from spotsweep.services.planner.searching import record_of
from spotsweep.services.planner.unit import UnitOfWork
from spotsweep.shared import log
from spotsweep.shared.db import Row
from spotsweep.shared.messages import TrialFinished, TrialLost, TrialProgress, TrialStarted
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState

_log = log.get("spotsweep.planner")
LifecycleEvent = TrialStarted | TrialFinished | TrialLost


@dataclass(frozen=True)
class Applied:
    decision: Decision
    recancel: bool = False  # an agent started a trial of a cancelled sweep: tell it again


def apply(uow: UnitOfWork, sweep: Row, row: Row, view: TrialView, event: LifecycleEvent | TrialProgress,
          spec: SweepSpec, search: Search) -> Applied:
    """Decide ``event`` about the trial ``row`` (as the unit of work has it) and stage its update."""
    if isinstance(event, TrialProgress):
        decision = _progress(uow, row, view, event, spec, search)
    else:
        smoke = row["idx"] < 0
        # decide() reads only whether the sweep is active and its retry policy: no counts needed here
        state = SweepState(spec.max_concurrent, int(sweep["total_trials"]), int(sweep["next_index"]), 0,
                           spec.retries.max_failures, sweep["state"] == "running", retry_policy(spec, smoke))
        run_end = None
        if isinstance(event, TrialFinished) and event.outcome == "completed" and not smoke and _current(view, event):
            run_end = _run_end(uow, row, event, spec, search)
        decision = decide(state, view, event, run_end)
    if decision.update is not None:
        uow.stage(row["trial_id"], decision.update)
        # Debug for a start: at hundreds of trials a second, one line per trial (its end) is enough at info.
        say = _log.debug if decision.update.state == TrialState.RUNNING else _log.info
        say("trial " + decision.update.state.value, kind=event.kind, reason=decision.reason or None)
    elif not isinstance(event, TrialProgress):
        _log.info("event ignored", kind=event.kind, reason=decision.reason)
    recancel = isinstance(event, TrialStarted) and view.state == TrialState.CANCELLED
    return Applied(decision, recancel)


def _current(view: TrialView, event: TrialFinished) -> bool:
    return not view.state.is_terminal and event.attempt == view.attempt and counted_run(view, event)


def _run_end(uow: UnitOfWork, row: Row, event: TrialFinished, spec: SweepSpec, search: Search) -> RunEnd | None:
    """Successive halving's decision at the end of a run that reached its budget;
    a promotion must fit the budget caps, else the trial completes at its rung."""
    if search.budget_param is None or search.stopper is None:
        return None
    values = objective_values(spec, {**(row["metrics"] or {}), **event.metrics})
    value = values[0] if values is not None else math.nan  # no objective: pruned as not finite
    regular, _ = uow.history(row["sweep_id"], spec)
    record = record_of(regular, row["idx"])
    if record is None:
        return None
    verdict = search.on_run_end(regular, record, value)
    if verdict.action == Action.PROMOTE and verdict.relaunch and verdict.budget is not None and spec.budget is not None:
        verdict = _within_budget(uow, row, event, spec, search, verdict)
    _log.info("successive halving", action=verdict.action.value, budget=verdict.budget, reason=verdict.reason)
    if search.segmented:  # PBT: each segment's lineage, with the decision
        exploit.record(uow, row, verdict, value, search.budget_param)
    return RunEnd(verdict, value, search.budget_param)


def _within_budget(uow: UnitOfWork, row: Row, event: TrialFinished, spec: SweepSpec, search: Search,
                   verdict: StepDecision) -> StepDecision:
    """The promotion, or COMPLETE at the rung reached when it would pass a cap
    (the sweep then launches no new trial: it could not promote them either)."""
    assert search.budget_param is not None and verdict.budget is not None
    reached = int(row["params"][search.budget_param])
    used = uow.trials.usage(row["sweep_id"], spec, search.budget_param, ended=(row["trial_id"], event.duration))
    # An exploit resumes at the donor's interval: the steps from there on are trained (again, from a donor behind).
    check = search.may_promote(used, reached if verdict.start is None else verdict.start, verdict.budget)
    if check.ok:
        return verdict
    sweep = uow.sweeps.lock(row["sweep_id"])  # as this transaction left it
    if sweep is not None and int(sweep["total_trials"]) > int(sweep["next_index"]):
        uow.sweeps.cap(row["sweep_id"], int(sweep["next_index"]), check.reason)
    return StepDecision(Action.COMPLETE, verdict.rung, reason=f"not promoted past {reached}: {check.reason}")


def _progress(uow: UnitOfWork, row: Row, view: TrialView, event: TrialProgress, spec: SweepSpec, search: Search) -> Decision:
    """Record a running trial's objective points and anomaly flags; let early stopping judge each point."""
    if view.state != TrialState.RUNNING or event.attempt != view.attempt or event.run_id != (view.run_id or ""):
        return Decision(reason="progress of a run that is not the trial's current one")
    return live(view, event.flags, _judged(uow, row, view, event, spec, search) if event.points else Decision())


def _judged(uow: UnitOfWork, row: Row, view: TrialView, event: TrialProgress, spec: SweepSpec, search: Search) -> Decision:
    uow.trials.merge_curve(row["trial_id"], event.points)
    if search.stopper is None or row["idx"] < 0:
        return Decision()
    regular, _ = uow.history(row["sweep_id"], spec, steps=[s for s, _ in event.points], full_curve=row["trial_id"])
    record = record_of(regular, row["idx"])
    if record is None:
        return Decision()
    rungs: dict[int, float] = {}
    for step, value in event.points:
        verdict = search.on_report(regular, record, step, value)
        if verdict.rung is not None:  # later points of this batch see the rung decided
            rungs[verdict.rung] = value
            record = replace(record, rungs={**record.rungs, verdict.rung: value})
        if verdict.action == Action.PRUNE:
            _log.info("early stopping prunes the trial", step=step, reason=verdict.reason)
            return prune(view, verdict.reason, {spec.metric.name: value}, rungs)
    return record_rungs(view, rungs) if rungs else Decision()
