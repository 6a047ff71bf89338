"""Asynchronous successive halving (ASHA) and Hyperband as brackets of it.

Semantics follow Ray Tune's ``async_hyperband.py``: bracket ``s`` has rungs
at budgets ``min * eta**(k + s)`` below ``max``; when a trial reaches a rung
(the highest one it passed and has not been decided at), its value is
compared with the values recorded at that rung by the other trials of its
bracket so far: it goes on if it is in the best ``1/eta`` of them (or the
rung is empty), otherwise it is pruned. Nothing waits for a rung to fill.
Unlike Ray, a non-finite value (a diverged trial) is pruned.

Two ways to go on (``BudgetParam.param``):
* with a budget parameter the trial runs up to its rung's budget and ends;
  PROMOTE carries the next budget and the planner relaunches the same trial
  from its checkpoint with the parameter set to it (it runs to that step);
* without one the trial runs to its own end and PROMOTE means "keep
  running"; PRUNE means the planner stops it.

State is the history: ``TrialRecord.rungs`` holds the value each trial
recorded at each rung, which the planner persists with the decision.

Brackets (Hyperband) get trials by index, deterministically, in proportion
to Optuna's HyperbandPruner budgets (``ceil(n * eta**s / (s + 1))`` for the
bracket ``s`` rungs above the most aggressive one), interleaved by smooth
weighted round-robin so that any run of consecutive trials covers them all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from spotsweep.services.planner.search.history import TrialRecord, sign
from spotsweep.shared.spec_search import BudgetParam, max_brackets


class Action(str, Enum):
    CONTINUE = "continue"  # no rung reached yet: nothing to do
    PROMOTE = "promote"  # go on to ``budget`` (relaunch from the checkpoint when ``relaunch``)
    PRUNE = "prune"  # end the trial as pruned (stop it if it is running)
    COMPLETE = "complete"  # reached the top budget: it ends as completed


@dataclass(frozen=True)
class StepDecision:
    action: Action
    rung: int | None = None  # the rung decided at: persist ``{rung: value}`` in the trial's rungs
    budget: int | None = None  # the next budget, for PROMOTE
    relaunch: bool = False  # PROMOTE by relaunching with the budget parameter set to ``budget``
    reason: str = ""


def bracket_rungs(budget: BudgetParam, eta: int, bracket: int) -> tuple[int, ...]:
    """The budgets a trial of ``bracket`` passes through, ending with ``max``."""
    rungs = []
    k = 0
    while (b := budget.min * eta ** (k + bracket)) < budget.max:
        rungs.append(b)
        k += 1
    return (*rungs, budget.max)


def _interleave(weights: Sequence[int]) -> tuple[int, ...]:
    """Smooth weighted round-robin: each bracket ``weights[i]`` times per cycle, spread out."""
    current = [0] * len(weights)
    total = sum(weights)
    order = []
    for _ in range(total):
        current = [c + w for c, w in zip(current, weights)]
        pick = max(range(len(weights)), key=lambda i: (current[i], -i))
        current[pick] -= total
        order.append(pick)
    return tuple(order)


class Asha:
    """The decision of one (or, for Hyperband, several) ASHA brackets."""

    def __init__(self, budget: BudgetParam, eta: int, brackets: int | None, mode: str) -> None:
        self.budget, self.eta, self.mode = budget, eta, mode
        top = max_brackets(budget, eta)
        self.brackets = top if brackets is None else brackets
        self.rungs = tuple(bracket_rungs(budget, eta, s) for s in range(self.brackets))
        n = self.brackets
        # Bracket s as Optuna's pruner index: its rungs start s steps up (fewer, larger rungs).
        weights = [math.ceil(n * eta ** (n - 1 - s) / (n - s)) for s in range(n)]
        self._order = _interleave(weights)

    def bracket_of(self, index: int) -> int:
        return self._order[index % len(self._order)]

    def initial_budget(self, index: int) -> int:
        """The budget trial ``index`` starts with: the first rung of its bracket."""
        return self.rungs[self.bracket_of(index)][0]

    def decide(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision:
        """What to do with ``trial`` now that it reported ``value`` at ``step``.

        ``history``: the sweep's trials (``trial`` among them or not). With a
        budget parameter call this when a run ends, with ``step`` the budget
        it ran to and ``value`` its final objective.
        """
        relaunch = self.budget.param is not None
        if step >= self.budget.max:
            return StepDecision(Action.COMPLETE, reason=f"reached the top budget {self.budget.max}")
        bracket = self.bracket_of(trial.index)
        rungs = self.rungs[bracket]
        passed = [r for r in rungs[:-1] if r <= step and r not in trial.rungs]
        if not passed:
            return StepDecision(Action.CONTINUE, reason=f"no new rung reached at step {step}")
        rung = passed[-1]  # the highest rung passed, as Ray does
        following = rungs[rungs.index(rung) + 1]
        if not math.isfinite(value):
            return StepDecision(Action.PRUNE, rung, reason=f"value {value} at rung {rung} is not finite")
        recorded = [sign(self.mode) * r.rungs[rung] for r in history
                    if r.index != trial.index and rung in r.rungs and self.bracket_of(r.index) == bracket]
        recorded = [v for v in recorded if math.isfinite(v)]
        if not recorded:
            return StepDecision(Action.PROMOTE, rung, following, relaunch, reason=f"first at rung {rung}")
        # Keep the best 1/eta: lower-is-better values at or under the 100/eta percentile.
        cutoff = float(np.percentile(recorded, 100 / self.eta))
        mine = sign(self.mode) * value
        if mine > cutoff:
            return StepDecision(Action.PRUNE, rung, reason=f"{value:.6g} at rung {rung} is outside the best 1/{self.eta} "
                                f"of {len(recorded)} (cutoff {sign(self.mode) * cutoff:.6g})")
        return StepDecision(Action.PROMOTE, rung, following, relaunch,
                            reason=f"{value:.6g} at rung {rung} is within the best 1/{self.eta} of {len(recorded)}")
