"""Median stopping, with the semantics of Optuna's ``MedianPruner`` (docs/search.md).

Nothing is stopped before ``startup_trials`` trials completed, before
``warmup_steps``, off the ``interval_steps`` grid (only the first report in
each interval is judged), or while fewer than ``min_trials`` completed
trials reported at the step. A trial whose values so far are all non-finite
(a diverged run) is stopped; other trials' non-finite values are left out of
the median. A trial is never stopped at or past the last step the completed
trials reached: it has then done its work (Optuna would stop it). Written against the history (each trial's ``curve``), so the
decision is the same after a planner restart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spotsweep.services.planner.search.history import TrialRecord, sign
from spotsweep.services.planner.search.rungs import Action, Promotion, StepDecision
from spotsweep.shared.spec_search import MedianStop
from spotsweep.shared.states import TrialState


def _first_in_interval(step: int, steps: Sequence[int], warmup: int, interval: int) -> bool:
    """Optuna's rule: judge ``step`` only if no earlier report fell in its interval.

    Only steps before ``step`` count: the planner records a whole progress
    event's points before judging each, so the curve may already hold later ones.
    """
    nearest_lower = (step - warmup) // interval * interval + warmup
    before = max((s for s in steps if s < step), default=-1)
    return before < nearest_lower


class Median:
    """Median stopping decisions for one sweep."""

    def __init__(self, stop: MedianStop, mode: str) -> None:
        self.stop, self.mode = stop, mode

    waits = False  # trials never wait for a promotion: they run to their end or are stopped

    def initial_budget(self, index: int) -> None:
        """Median stopping has no budget parameter to fill in."""
        return None

    def promotions(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        return []

    def _not_judged(self, completed: Sequence[TrialRecord], curve: dict[int, float], step: int) -> str:
        """Why ``step`` is not judged at all (empty when it is): startup, warm-up, the end, off the interval grid."""
        stop = self.stop
        if not completed or len(completed) < stop.startup_trials:
            return f"{len(completed)} of {stop.startup_trials} startup trials completed"
        if step < stop.warmup_steps:
            return f"step {step} is in the warm-up ({stop.warmup_steps} steps)"
        # Unlike Optuna: at the step where the completed runs ended, the trial has done its work too; a stop
        # would save nothing and turn a finished run into a pruned one.
        last = max(r.last_step for r in completed)
        if last and step >= last:
            return f"step {step} is the last step the completed trials reached"
        if not _first_in_interval(step, list(curve), stop.warmup_steps, stop.interval_steps):
            return f"step {step} is not judged (interval {stop.interval_steps})"
        return ""

    def decide(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision:
        """Whether ``trial`` goes on after reporting ``value`` at ``step``.

        ``trial.curve`` may or may not already hold this report, and may hold
        later steps (a progress event's points are recorded before each is
        judged): only steps up to ``step`` count. Returns CONTINUE or PRUNE.
        """
        completed = [r for r in history if r.state == TrialState.COMPLETED and r.index != trial.index]
        curve = {k: v for k, v in trial.curve.items() if k < step} | {step: value}
        not_judged = self._not_judged(completed, curve, step)
        if not_judged:
            return StepDecision(Action.CONTINUE, reason=not_judged)
        # A NaN or an infinity (of either sign) is a diverged run, never its best value:
        # non-finite values rank last in every strategy, as in every report.
        finite = [sign(self.mode) * v for v in curve.values() if math.isfinite(v)]
        if not finite:
            return StepDecision(Action.PRUNE, reason=f"every value up to step {step} is NaN or infinite")
        best = min(finite)
        others = [r.curve[step] for r in completed if step in r.curve and math.isfinite(r.curve[step])]
        if len(others) < self.stop.min_trials:
            return StepDecision(Action.CONTINUE, reason=f"{len(others)} completed trial(s) reported step {step}")
        median = float(np.nanpercentile([sign(self.mode) * v for v in others], 50))
        if math.isnan(median) or best <= median:
            return StepDecision(Action.CONTINUE, reason=f"best {sign(self.mode) * best:.6g} is no worse than the median")
        return StepDecision(Action.PRUNE, reason=f"best {sign(self.mode) * best:.6g} by step {step} is worse than the median "
                            f"{sign(self.mode) * median:.6g} of {len(others)} completed trial(s)")
