"""One sweep's search, as the planner uses it: what the next trial runs, and
what to do when a trial reports.

:class:`Search` is built from a spec alone (cache it next to the parsed
spec); every method is a pure function of its arguments and the history the
planner reads from its database (docs/search.md, "The pure API").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spotsweep.services.planner.search.budget import Usage, Verdict, may_continue, may_launch
from spotsweep.services.planner.search.history import TrialRecord, objective_names
from spotsweep.services.planner.search.registry import Sampler, Stopper, sampler_for, stopper_for
from spotsweep.services.planner.search.rungs import Action, Promotion, StepDecision
from spotsweep.services.planner.search.smoke import SmokeDecision, smoke_stage
from spotsweep.shared.space import config_params, configs, params_at, total_trials
from spotsweep.shared.spec import RandomStrategy, SweepSpec
from spotsweep.shared.spec_search import budget_of, smoke_param


@dataclass(frozen=True)
class Proposal:
    """A new trial's params; persist ``attrs`` with the trial and ``study_attrs``
    with the sweep (both JSON), and pass them back in the history."""

    params: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    study_attrs: dict[str, Any] | None = None  # None: unchanged


class Search:
    """One sweep's search: a sampler (or a static design) for what trials run,
    and a stopper (or none) for when they end, both from the plugin registry."""

    def __init__(self, spec: SweepSpec) -> None:
        self.spec = spec
        self.model: Sampler | None = sampler_for(spec)  # None: a static design gives the params
        self.stopper: Stopper | None = stopper_for(spec)
        budget = budget_of(spec)
        self.budget_param = budget.param if budget is not None else None

    @property
    def _relaunching(self) -> bool:
        """Whether the stopper decides when a run ends and relaunches with the budget parameter."""
        return self.stopper is not None and self.budget_param is not None

    def _initial_budget(self, index: int) -> int:
        assert self.stopper is not None
        budget = self.stopper.initial_budget(index)
        assert budget is not None, "a stopper with a budget parameter gives every trial its first budget"
        return budget

    @property
    def segmented(self) -> bool:
        """Whether the stopper's relaunches are segments whose lineage the
        planner records (PBT: a segment may start from another trial's checkpoint)."""
        return self._relaunching and bool(getattr(self.stopper, "segments", False))

    @property
    def waits(self) -> bool:
        """Whether trials wait at rungs for promotions (ASHA's paper rule): the
        planner asks :meth:`promotions` whenever slots are free."""
        return self._relaunching and self.stopper is not None and self.stopper.waits

    def promotions(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        """Waiting trials to relaunch from their checkpoints now (the paper's
        ``get_job``), at most ``slots``, before any new config starts;
        ``final``: nothing runs and no new config is left."""
        if not self.waits or self.stopper is None:
            return []
        return self.stopper.promotions(history, slots, final)

    @property
    def wants_progress(self) -> bool:
        """Whether running trials must send their objective's points: early
        stopping decides while they run (median, or successive halving
        without a budget parameter)."""
        return self.stopper is not None and not self._relaunching

    @property
    def total_trials(self) -> int:
        return total_trials(self.spec)

    def propose(self, index: int, history: Sequence[TrialRecord] = (),
                study_attrs: Mapping[str, Any] | None = None) -> Proposal:
        """Params for trial ``index``; ``history``: the sweep's trials launched so
        far (smoke trials left out), ``study_attrs``: as last returned."""
        total = self.total_trials
        if not 0 <= index < total:
            raise IndexError(f"trial index {index} out of range for a sweep of {total} trials")
        proposal = Proposal(params_at(self.spec, index)) if self.model is None else self._suggest(index, history, study_attrs)
        if self.budget_param is not None:  # successive halving with a budget parameter: the first rung's
            proposal.params[self.budget_param] = self._initial_budget(index)
        return proposal

    def _suggest(self, index: int, history: Sequence[TrialRecord], study_attrs: Mapping[str, Any] | None) -> Proposal:
        assert self.model is not None
        config, repeat = divmod(index, self.spec.repeats)
        if repeat:  # a repeat runs its config's params with another seed
            first = next((r for r in history if r.index == config * self.spec.repeats), None)
            if first is None:
                raise LookupError(f"trial {index} repeats trial {config * self.spec.repeats}, which is not in the history")
            params = {k: first.params[k] for k in self.spec.space}
            return Proposal({**params, "seed": repeat})
        suggestion = self.model.suggest(history, index, study_attrs)
        params = suggestion.params
        if self.spec.repeats > 1:
            params["seed"] = 0
        return Proposal(params, suggestion.attrs, suggestion.study_attrs)

    def on_report(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision:
        """A trial reported its (first) objective ``value`` at ``step`` while running."""
        if self.stopper is None or self._relaunching:
            # With a budget parameter, ASHA decides when the run ends (on_run_end).
            return StepDecision(Action.CONTINUE, reason="no early stopping while running")
        return self.stopper.decide(history, trial, step, value)

    def on_run_end(self, history: Sequence[TrialRecord], trial: TrialRecord, value: float) -> StepDecision:
        """A trial's run completed with final objective ``value``: with a budget
        parameter, PROMOTE (relaunch with ``budget``), PRUNE or COMPLETE.

        CONTINUE here means the rung was decided already (a redelivered
        event): nothing to do.
        """
        if self.stopper is None or self.budget_param is None:
            return StepDecision(Action.COMPLETE, reason="the trial ran to its end")
        budget = int(trial.params[self.budget_param])
        return self.stopper.decide(history, trial, budget, value)

    def smoke(self, smoke_trials: Sequence[TrialRecord]) -> SmokeDecision:
        return smoke_stage(self.spec.smoke, smoke_trials, objective_names(self.spec))

    def smoke_params(self, k: int) -> dict[str, Any]:
        """Params of smoke trial ``k``: config ``k`` of a static design (a random
        one for model-based strategies), with the smoke budget."""
        spec = self.spec
        if self.model is None:
            params = config_params(spec, k % configs(spec))
        else:
            sampled = RandomStrategy(trials=k + 1, seed=getattr(spec.strategy, "seed", 0))
            params = config_params(spec.model_copy(update={"strategy": sampled}), k)
        if spec.repeats > 1:
            params["seed"] = 0
        param = smoke_param(spec)
        if self.budget_param is not None and self.budget_param != param:
            params[self.budget_param] = self._initial_budget(k)
        if param is not None and spec.smoke is not None and spec.smoke.budget is not None:
            params[param] = spec.smoke.budget
        return params

    def run_seconds(self, usage: Usage, index: int) -> float | None:
        """Expected seconds of new trial ``index``'s first run: with a
        successive-halving budget parameter, its first rung's budget times
        the seconds per budget unit; otherwise a whole trial."""
        if usage.unit_seconds is not None and self._relaunching:
            return usage.unit_seconds * self._initial_budget(index)
        return usage.trial_seconds

    def run_steps(self, usage: Usage, index: int) -> float | None:
        """Expected steps of new trial ``index``'s first run: with a
        successive-halving budget parameter, exactly its first rung's
        budget; otherwise a whole trial's (the median completed trial's)."""
        if self._relaunching:
            return float(self._initial_budget(index))
        return usage.trial_steps

    def may_launch(self, usage: Usage) -> Verdict:
        """Whether one more trial, expected to take ``usage.trial_seconds`` and
        train ``usage.trial_steps``, fits the caps."""
        return may_launch(self.spec.budget, self.spec.pricing, usage)

    def may_promote(self, usage: Usage, budget: int, to: int) -> Verdict:
        """Whether a trial that ran to ``budget`` may be relaunched to ``to``
        (it resumes from its checkpoint: ``to - budget`` units more) without
        passing a step, GPU-hour, cost or wall-time cap."""
        seconds = None if usage.unit_seconds is None else usage.unit_seconds * max(0, to - budget)
        return may_continue(self.spec.budget, self.spec.pricing,
                            replace(usage, trial_seconds=seconds, trial_steps=float(max(0, to - budget))))

