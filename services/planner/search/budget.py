"""Budget caps as a launch decision (docs/search.md, "Budgets, pricing, smoke").

:func:`may_launch` says whether one more trial may start given what the
sweep has used so far, and :func:`may_continue` whether a trial in flight may
run on (a promotion: not a new trial, so ``max_trials`` does not apply). A
cap is never passed on purpose: a trial is refused when what was used, plus
what the trials in flight are still expected to use, plus its own expected
use would pass the cap. Before any trial has finished there is no estimate,
and only what was used counts. Under successive halving with a budget
parameter cost grows with the budget reached, so the estimate is per budget
unit (:func:`estimate_unit_seconds`); otherwise per trial. Times are passed
in; nothing here reads a clock. (What a sweep cost is the reporter's:
services/reporter/summary.py ``cost_of``.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spotsweep.shared.spec_search import Budget, Pricing


@dataclass(frozen=True)
class Usage:
    """What the sweep has used, as the planner measures it."""

    launched: int  # trials launched so far (each counted once, whatever its attempts)
    gpu_seconds: float  # GPU-seconds used by every attempt so far (running ones up to now)
    elapsed_seconds: float  # the time the sweep has been running (not the time between its end and an extend)
    trial_seconds: float | None = None  # expected seconds of the run asked for: a trial, or a promotion (None: no estimate yet)
    gpus: int = 1  # GPUs per trial
    committed_gpu_seconds: float = 0.0  # still expected from the trials in flight (:func:`committed`)
    unit_seconds: float | None = None  # expected seconds per budget unit (successive halving with a budget parameter)
    steps: float = 0.0  # training steps so far (:func:`trial_steps` over every trial)
    committed_steps: float = 0.0  # steps still expected from the trials in flight
    trial_steps: float | None = None  # expected steps of the run asked for: a trial, or a promotion (None: no estimate)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""  # why not, naming the cap: "budget.max_gpu_hours: ..."


def estimate_trial_seconds(durations: Sequence[float]) -> float | None:
    """Expected seconds of one trial from the finished ones (the median: robust to a few stragglers)."""
    return statistics.median(durations) if durations else None


def estimate_trial_steps(steps: Sequence[float]) -> float | None:
    """Expected steps of one trial without a budget parameter: the median of
    what the completed trials reported (the trial decides when it ends)."""
    return statistics.median(steps) if steps else None


def estimate_unit_seconds(ended: Sequence[tuple[float, float]]) -> float | None:
    """Expected seconds per budget unit from trials that ended, each as
    ``(seconds run over all its attempts, budget units it reached)``: the
    total time over the total units, so short low-rung trials and long
    promoted ones weigh by what they trained."""
    units = sum(u for _, u in ended if u > 0)
    return sum(s for s, u in ended if u > 0) / units if units > 0 else None


def trial_steps(budget: float | None, reached: float, reported: float, in_flight: bool,
                started: bool) -> tuple[float, float | None]:
    """A trial's training steps for ``budget.max_steps``: ``(trained, to train)``.

    With a successive-halving budget parameter (``budget``: its value, the
    budget the trial's current or last run trains to) a trial has trained the
    budget its last run reached, ``reached`` (the highest rung decided, 0
    before the first) while a run is in flight, and ``budget`` once it ended
    or waits at a rung (a failed run counts its whole budget; one that never
    started, none). The run in flight still has ``budget - reached`` to
    train. Without one it is the highest step the trial reported,
    ``reported``, and what a run in flight has left is not known here
    (None: :func:`committed_steps` estimates it).
    """
    if budget is None:
        return max(0.0, reported), None if in_flight else 0.0
    if in_flight:
        return reached, max(0.0, budget - reached)
    return (budget if started else 0.0), 0.0


def committed_steps(runs: Sequence[tuple[float, float | None]], per_trial: float | None) -> float:
    """Steps the trials in flight are still expected to train, each as
    :func:`trial_steps` gives it; one whose rest is not known is expected to
    reach ``per_trial`` steps (nothing when there is no estimate yet)."""
    rest = 0.0
    for trained, left in runs:
        if left is None:
            left = max(0.0, per_trial - trained) if per_trial is not None else 0.0
        rest += left
    return rest


def committed(runs: Sequence[tuple[float | None, float]], gpus: int) -> float:
    """GPU-seconds the trials in flight are still expected to use, each as
    ``(expected seconds of its current run or None, seconds it ran so far)``
    (0 for one that waits): what each has left of its estimate."""
    return gpus * sum(max(0.0, expected - ran) for expected, ran in runs if expected is not None)


def may_launch(budget: Budget | None, pricing: Pricing | None, usage: Usage) -> Verdict:
    """Whether one more trial (expected to take ``usage.trial_seconds``) may launch without passing a cap."""
    if budget is None:
        return Verdict(True)
    if budget.max_trials is not None and usage.launched >= budget.max_trials:
        return Verdict(False, f"budget.max_trials: {usage.launched} trial(s) launched, the cap is {budget.max_trials}")
    return _within(budget, pricing, usage, "one more trial", "a trial")


def may_continue(budget: Budget | None, pricing: Pricing | None, usage: Usage) -> Verdict:
    """Whether a trial in flight may run on for ``usage.trial_seconds`` more (a
    successive-halving promotion) without passing the GPU-hour, cost or
    wall-time cap. ``max_trials`` counts trials, not runs: it does not apply."""
    if budget is None:
        return Verdict(True)
    return _within(budget, pricing, usage, "the promotion", "the promotion")


def _within(budget: Budget, pricing: Pricing | None, usage: Usage, more: str, run: str) -> Verdict:
    if budget.max_steps is not None:
        steps = usage.steps + usage.committed_steps + (usage.trial_steps or 0.0)
        if usage.steps >= budget.max_steps or steps > budget.max_steps:
            return Verdict(False, f"budget.max_steps: {usage.steps:.0f} step(s) trained, {steps:.0f} expected with "
                           f"{more}, the cap is {budget.max_steps}")
    expected = usage.gpu_seconds + usage.committed_gpu_seconds + (usage.trial_seconds or 0.0) * usage.gpus
    if budget.max_gpu_hours is not None:
        cap = budget.max_gpu_hours * 3600
        if usage.gpu_seconds >= cap or expected > cap:
            return Verdict(False, f"budget.max_gpu_hours: {_h(usage.gpu_seconds)} GPU-h used, {_h(expected)} expected with "
                           f"{more}, the cap is {budget.max_gpu_hours:g}")
    if budget.max_cost is not None and pricing is not None:
        used, would = usage.gpu_seconds / 3600 * pricing.gpu_hour, expected / 3600 * pricing.gpu_hour
        if used >= budget.max_cost or would > budget.max_cost:
            return Verdict(False, f"budget.max_cost: {used:.2f} spent, {would:.2f} expected with {more}, "
                           f"the cap is {budget.max_cost:g}")
    if budget.wall_time is not None:
        finish = usage.elapsed_seconds + (usage.trial_seconds or 0.0)
        if usage.elapsed_seconds >= budget.wall_time or finish > budget.wall_time:
            return Verdict(False, f"budget.wall_time: {usage.elapsed_seconds:.0f}s elapsed, {run} takes about "
                           f"{usage.trial_seconds or 0:.0f}s, the cap is {budget.wall_time:.0f}s")
    return Verdict(True)


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"
