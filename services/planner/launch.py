"""What runs next: new trials within ``max_concurrent`` and the queue window,
through the smoke stage and the budget caps, with params from the sweep's search.

:func:`top_up` runs in the caller's unit of work, under the sweep's row lock,
after the decisions about its trials were staged; new trials are written
``pending`` (the outbox, published after the commit), and a budget cap's
refusal is the sweep's note (:mod:`.search.budget`). The choices are the pure
objects of :mod:`.search`; this module only feeds them what the database holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import RetryPolicy, TrialUpdate, TrialView, fill
from spotsweep.services.planner.outcome import sweep_end
from spotsweep.services.planner.search import Search, TrialRecord
from spotsweep.services.planner.unit import UnitOfWork
from spotsweep.shared import log
from spotsweep.shared.db import Row
from spotsweep.shared.naming import trial_name
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState

_log = log.get("spotsweep.planner")


@dataclass(frozen=True)
class TopUp:
    launched: int = 0
    done: bool = False  # the sweep ended (completed, or failed in its smoke stage)
    failed: str | None = None  # the smoke stage failed with this error: stop the trials in flight
    pruned: tuple[str, ...] = ()  # waiting trials pruned as the sweep ended: their checkpoints may go


def retry_policy(spec: SweepSpec, smoke: bool = False) -> RetryPolicy:
    """The spec's retries; smoke trials are never retried (a failure ends the stage)."""
    r = spec.retries
    return RetryPolicy(max_failures=0 if smoke else r.max_failures, on_oom=r.on_oom, batch_param=r.batch_param,
                       accum_param=r.accum_param)


def _complete(params: dict[str, Any], spec: SweepSpec) -> dict[str, Any]:
    if spec.retries.on_oom == "halve_batch":
        params.setdefault(spec.retries.accum_param, 1)  # the accumulation an OOM retry doubles
    return params


def top_up(uow: UnitOfWork, sweep_id: str, spec: SweepSpec, search: Search, window: int | None) -> TopUp:
    """Launch what may run now; call it with the sweep's row locked by this transaction."""
    sweep = uow.sweeps.lock(sweep_id)  # fresh: decisions in this transaction may have changed it
    if sweep is None or sweep["state"] != "running":
        return TopUp()
    state = store.sweep_state(uow.trials.in_flight(sweep_id), sweep, spec.max_concurrent, retry_policy(spec), window)
    regular: list[TrialRecord] = []
    if search.model is not None or spec.smoke is not None or search.waits:
        # Model-based samplers read pruned trials' curves (Optuna ranks them by their intermediate values).
        regular, smoke = uow.history(sweep_id, spec, pruned_curves=search.model is not None)
        if spec.smoke is not None:
            stage = search.smoke(smoke)
            if stage.failed:
                uow.sweeps.fail(sweep_id, stage.error or "the smoke stage failed")
                _log.warning("smoke stage failed: sweep stopped", error=stage.error)
                return TopUp(done=True, failed=stage.error)
            if stage.hold:
                room = min(spec.max_concurrent - state.in_flight, len(stage.launch))
                new: list[store.NewTrial] = [(-1 - k, f"{spec.name}_smoke_{k}", _complete(search.smoke_params(k), spec), {})
                                             for k in stage.launch[:max(0, room)]]
                uow.trials.insert(sweep_id, new, advance=False)
                return TopUp(launched=len(new))
    n, _ = fill(state)
    promoted = 0
    if search.waits:  # a free slot goes to a waiting trial that ranks before any new config (the paper's get_job)
        room, _ = fill(replace(state, total_trials=state.next_index + spec.max_concurrent))
        final = state.next_index >= state.total_trials and state.in_flight == 0  # no rung will see more trials
        promoted = _promote(uow, sweep, spec, search, room, regular, final)
        n = min(n, room - promoted)
    launched, total = _launch(uow, sweep, spec, search, n, regular)
    done = state.next_index + launched >= total and state.in_flight + launched + promoted == 0
    pruned = _prune_waiting(uow, regular, sweep_id) if done and search.waits else ()
    if done:
        ended, error = sweep_end(uow.trials.outcomes(sweep_id))
        uow.sweeps.finish(sweep_id, ended, error)
        _log.info(f"sweep {ended}", error=error)
    return TopUp(launched=launched, done=done, pruned=pruned)


def _promote(uow: UnitOfWork, sweep: Row, spec: SweepSpec, search: Search, n: int, regular: list[TrialRecord],
             final: bool) -> int:
    """ASHA's paper rule: relaunch up to ``n`` waiting trials that rank in the best
    1/eta of their rung, top rung first, each from its checkpoint (a new attempt
    with the larger budget), before any new config. A promotion a budget cap
    refuses completes the trial at its rung, and the sweep launches nothing new."""
    param = search.budget_param
    assert param is not None
    sweep_id = sweep["sweep_id"]
    promoted = 0
    for p in search.promotions(regular, n, final):
        trial_id = store.trial_id_for(sweep_id, p.index)
        view = _paused(uow, trial_id)
        if view is None:
            continue
        if spec.budget is not None:
            check = search.may_promote(uow.trials.usage(sweep_id, spec, param), p.rung, p.budget)
            if not check.ok:
                uow.stage(trial_id, TrialUpdate(TrialState.COMPLETED, view.attempt, view.failures, view.preemptions,
                                                finished=True))
                if int(sweep["total_trials"]) > int(sweep["next_index"]):
                    uow.sweeps.cap(sweep_id, int(sweep["next_index"]), check.reason)
                _log.info("not promoted: budget reached", reason=check.reason)
                continue
        params = {**view.params, param: p.budget}
        uow.stage(trial_id, TrialUpdate(TrialState.PENDING, view.attempt + 1, view.failures, view.preemptions,
                                        params=params, losses=0))
        _log.info("successive halving promotes a waiting trial", trial=trial_id, budget=p.budget, reason=p.reason)
        promoted += 1
    return promoted


def _paused(uow: UnitOfWork, trial_id: str) -> TrialView | None:
    """The trial, locked, while it waits at its rung; None otherwise."""
    uow.load([trial_id])
    found = uow.trial(trial_id)
    return found[1] if found is not None and found[1].state == TrialState.PAUSED else None


def _prune_waiting(uow: UnitOfWork, regular: list[TrialRecord], sweep_id: str) -> tuple[str, ...]:
    """Nothing runs and nothing more can: the trials still waiting at a rung were
    never in its best 1/eta; they end pruned there. Returns their ids."""
    pruned: list[str] = []
    for r in regular:
        trial_id = store.trial_id_for(sweep_id, r.index)
        view = _paused(uow, trial_id) if r.state == TrialState.PAUSED else None
        if view is None:
            continue
        rung = max(r.rungs) if r.rungs else None
        uow.stage(trial_id, TrialUpdate(TrialState.PRUNED, view.attempt, view.failures, view.preemptions, finished=True,
                                        error=f"not promoted past rung {rung}: never in the best 1/eta of the trials its rung saw"))
        pruned.append(trial_id)
    return tuple(pruned)


def _launch(uow: UnitOfWork, sweep: Row, spec: SweepSpec, search: Search, n: int, regular: list[TrialRecord]) -> tuple[int, int]:
    """Write up to ``n`` new trials after the sweep's cursor; fewer when a budget cap
    says so. Returns how many, and the sweep's total trials (capped or not)."""
    sweep_id, first, total = sweep["sweep_id"], int(sweep["next_index"]), int(sweep["total_trials"])
    if n <= 0:
        return 0, total
    used = uow.trials.usage(sweep_id, spec, search.budget_param) if spec.budget is not None else None
    study: dict[str, Any] | None = None
    study_attrs = sweep["search_attrs"]
    batch: list[store.NewTrial] = []
    batch_seconds = 0.0  # what the trials of this batch are expected to take
    batch_steps = 0.0  # and to train
    seen = list(regular)
    for index in range(first, first + n):
        if used is not None:
            expected, steps = search.run_seconds(used, index), search.run_steps(used, index)
            verdict = search.may_launch(replace(used, launched=used.launched + len(batch), trial_seconds=expected,
                                                committed_gpu_seconds=used.committed_gpu_seconds + batch_seconds * used.gpus,
                                                trial_steps=steps, committed_steps=used.committed_steps + batch_steps))
            if not verdict.ok:
                uow.sweeps.cap(sweep_id, index, verdict.reason)
                _log.info("budget reached: no more trials", reason=verdict.reason)
                total = index
                break
            batch_seconds += expected or 0.0
            batch_steps += steps or 0.0
        proposal = search.propose(index, seen, study if study is not None else study_attrs)
        if proposal.study_attrs is not None:
            study = proposal.study_attrs
        params = _complete(dict(proposal.params), spec)
        batch.append((index, trial_name(spec, index, params), params, dict(proposal.attrs)))
        # In flight from now on: the next suggestion in this batch must see it (constant liar).
        seen.append(TrialRecord(index=index, params=params, state=TrialState.PENDING, attrs=proposal.attrs))
    uow.trials.insert(sweep_id, batch)
    if study is not None:
        uow.sweeps.set_study_attrs(sweep_id, study)
    return len(batch), total
