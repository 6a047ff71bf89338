"""Asynchronous successive halving (ASHA) and Hyperband as brackets of it.

Bracket ``s`` has rungs at budgets ``min * eta**(k + s)`` below ``max``.
docs/search.md ("ASHA, Hyperband and median stopping") tells the two
promotion rules: ``paper`` (Li et al., MLSys 2020: a trial waits at its rung,
PAUSE, and :meth:`Asha.promotions` promotes the best ``floor(n / eta)`` a
rung saw, never more in all, which bounds a bracket's spend) and ``async``
(Ray Tune's ``async_hyperband.py``: decided once on arrival; the only rule
without a budget parameter, as a running trial cannot wait). A non-finite
value is pruned.

With a budget parameter PROMOTE carries the next budget and the planner
relaunches the trial from its checkpoint; without one PROMOTE means "keep
running" and PRUNE that the planner stops it. The state is the history
(``TrialRecord.rungs``). Hyperband's brackets get trials by index in
Optuna's HyperbandPruner proportions, interleaved by smooth weighted
round-robin so that any run of consecutive trials covers them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from spotsweep.services.planner.search.history import TrialRecord, sign
from spotsweep.shared.spec_search import BudgetParam, max_brackets
from spotsweep.shared.states import TrialState


class Action(str, Enum):
    CONTINUE = "continue"  # no rung reached yet: nothing to do
    PROMOTE = "promote"  # go on to ``budget`` (relaunch from the checkpoint when ``relaunch``)
    PRUNE = "prune"  # end the trial as pruned (stop it if it is running)
    COMPLETE = "complete"  # reached the top budget: it ends as completed
    PAUSE = "pause"  # wait at the rung for a promotion (the paper's rule: :meth:`Asha.promotions`)


@dataclass(frozen=True)
class StepDecision:
    action: Action
    rung: int | None = None  # the rung decided at: persist ``{rung: value}`` in the trial's rungs
    budget: int | None = None  # the next budget, for PROMOTE
    relaunch: bool = False  # PROMOTE by relaunching with the budget parameter set to ``budget``
    reason: str = ""
    params: Mapping[str, Any] | None = None  # PROMOTE: the relaunch runs with these params (PBT's explore)
    donor: int | None = None  # PROMOTE: it starts from this trial's checkpoint, copied first (PBT's exploit)
    start: int | None = None  # PROMOTE: the budget the relaunch resumes at, when not ``rung`` (the donor's interval)


@dataclass(frozen=True)
class Promotion:
    """A waiting trial to relaunch from its checkpoint with the parameter set to ``budget``."""

    index: int
    rung: int  # the budget it waited at
    budget: int
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

    def __init__(self, budget: BudgetParam, eta: int, brackets: int | None, mode: str, promotion: str = "async") -> None:
        self.budget, self.eta, self.mode = budget, eta, mode
        # The paper's rule needs a trial that can wait: one that ends its run at each rung.
        self.waits = promotion == "paper" and budget.param is not None
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
        if self.waits:
            return StepDecision(Action.PAUSE, rung, reason=f"waits at rung {rung} for a promotion")
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

    def promotions(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        """The paper's ``get_job`` for ``slots`` free slots: waiting trials in the best
        ``floor(n / eta)`` of their rung's, from the top rung down, best first. ``final``:
        no rung will see more trials, so one that promoted no one yet promotes its best
        (every bracket trains one trial to ``max``; a finite grid would stop short)."""
        if not self.waits or slots <= 0:
            return []
        out = self._ranked(history, slots)
        return out if out or not final else self._ranked(history, slots, final=True)

    def _ranked(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        by_rung: list[tuple[int, int]] = sorted(((r, b) for b, rungs in enumerate(self.rungs) for r in rungs[:-1]),
                                                reverse=True)  # (rung budget, bracket), top rung first
        out: list[Promotion] = []
        for rung, bracket in by_rung:
            out.extend(self._at_rung(history, rung, bracket, final))
            if len(out) >= slots:
                return out[:slots]
        return out

    def _at_rung(self, history: Sequence[TrialRecord], rung: int, bracket: int, final: bool) -> list[Promotion]:
        """The trials waiting at ``rung`` of ``bracket`` that go on now, best first."""
        assert self.budget.param is not None
        seen = [r for r in history if rung in r.rungs and math.isfinite(r.rungs[rung])
                and self.bracket_of(r.index) == bracket]
        keep = len(seen) // self.eta
        following = self.rungs[bracket][self.rungs[bracket].index(rung) + 1]
        promoted = sum(following in r.rungs or int(r.params[self.budget.param]) > rung for r in seen)
        if final and keep == 0 and seen and not promoted:
            keep = 1  # the rung's best goes on: no other trial ever will
        # The quota: at most floor(n / eta) of the rung's n ever go on (the paper's rule alone lets
        # trials promoted early, later outranked, count on top of it: its spend had no bound).
        quota = keep - promoted
        if quota <= 0:
            return []
        ranked = sorted(seen, key=lambda r: (sign(self.mode) * r.rungs[rung], r.index))[:keep]
        waiting = [r for r in ranked if r.state == TrialState.PAUSED and int(r.params[self.budget.param]) == rung]
        return [Promotion(r.index, rung, following, f"{r.rungs[rung]:.6g} at rung {rung} is within the "
                          f"best {keep} of {len(seen)} (1/{self.eta})") for r in waiting[:quota]]
