"""ASHA and Hyperband decisions, fed plain reports (as Ray Tune's scheduler tests do)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from spotsweep.services.planner.search import Action, Asha, TrialRecord, bracket_rungs
from spotsweep.shared.spec import BudgetParam
from spotsweep.shared.states import TrialState

BUDGET = BudgetParam(param="steps", min=1, max=81)


def rec(index: int, rungs: dict[int, float], state: TrialState = TrialState.RUNNING, steps: int = 1) -> TrialRecord:
    return TrialRecord(index, {"x": index, "steps": steps}, state, rungs=rungs)


def test_rungs_grow_by_eta_and_end_at_max() -> None:
    assert bracket_rungs(BUDGET, 3, 0) == (1, 3, 9, 27, 81)
    assert bracket_rungs(BUDGET, 3, 2) == (9, 27, 81)
    assert bracket_rungs(BudgetParam(min=10, max=100), 3, 0) == (10, 30, 90, 100)
    assert bracket_rungs(BUDGET, 3, 4) == (81,)  # the last bracket: plain full runs


def test_first_at_a_rung_goes_on_and_the_best_third_is_kept() -> None:
    asha = Asha(BUDGET, 3, 1, "min")
    first = asha.decide([], rec(0, {}), 1, 5.0)
    assert (first.action, first.rung, first.budget, first.relaunch) == (Action.PROMOTE, 1, 3, True)
    history = [rec(i, {1: v}) for i, v in enumerate([5.0, 4.0, 3.0, 2.0, 1.0])]
    # cutoff: the 1/3 quantile of [1..5] = 2.333: 2.0 goes on, 2.5 is pruned.
    assert asha.decide(history, rec(9, {}), 1, 2.0).action == Action.PROMOTE
    pruned = asha.decide(history, rec(9, {}), 1, 2.5)
    assert (pruned.action, pruned.rung, pruned.budget) == (Action.PRUNE, 1, None)
    assert "outside the best 1/3 of 5 (cutoff 2.33333)" in pruned.reason


def test_max_mode_keeps_the_largest() -> None:
    asha = Asha(BUDGET, 3, 1, "max")
    history = [rec(i, {1: v}) for i, v in enumerate([5.0, 4.0, 3.0, 2.0, 1.0])]
    assert asha.decide(history, rec(9, {}), 1, 4.0).action == Action.PROMOTE
    assert asha.decide(history, rec(9, {}), 1, 3.5).action == Action.PRUNE


def test_matches_ray_tune_bracket_example() -> None:
    # Ray's _Bracket(min_t=1, max_t=10, rf=2, s=0) docstring: rewards 2, 4 go on; cutoff 3.0; reward 1 stops.
    asha = Asha(BudgetParam(min=1, max=10), 2, 1, "max")
    t1 = asha.decide([], rec(1, {}), 1, 2.0)
    t2 = asha.decide([rec(1, {1: 2.0})], rec(2, {}), 1, 4.0)
    t3 = asha.decide([rec(1, {1: 2.0}), rec(2, {1: 4.0})], rec(3, {}), 1, 1.0)
    assert [t1.action, t2.action, t3.action] == [Action.PROMOTE, Action.PROMOTE, Action.PRUNE]
    assert "cutoff 3" in t3.reason
    assert t1.relaunch is False  # no budget parameter: the trial keeps running


def test_decides_once_per_rung_at_the_highest_passed() -> None:
    asha = Asha(BUDGET, 3, 1, "min")
    others = [rec(i, {1: 1.0, 3: 1.0, 9: float(i)}) for i in range(1, 7)]
    me = rec(0, {1: 0.5})  # decided at rung 1 already; now reports at step 10
    d = asha.decide(others, me, 10, 3.0)
    assert (d.action, d.rung) == (Action.PRUNE, 9)  # rung 9, not 3: the highest passed
    assert asha.decide(others, rec(0, {1: 0.5, 3: 0.5, 9: 0.5}), 12, 0.1).action == Action.CONTINUE
    assert asha.decide(others, me, 81, 9.0).action == Action.COMPLETE
    assert asha.decide(others, rec(0, {}), 0, 9.0).action == Action.CONTINUE


def test_only_the_trials_own_bracket_counts_and_non_finite_is_pruned() -> None:
    asha = Asha(BUDGET, 3, 2, "min")
    in_b0 = [i for i in range(40) if asha.bracket_of(i) == 0]
    in_b1 = [i for i in range(40) if asha.bracket_of(i) == 1]
    rival = [rec(i, {3: 0.1}) for i in in_b1[:5]]  # great values, other bracket
    assert asha.decide(rival, rec(in_b0[0], {1: 1.0}), 3, 5.0).action == Action.PROMOTE
    assert asha.decide([], rec(in_b0[0], {}), 1, math.nan).action == Action.PRUNE
    assert asha.decide([rec(in_b0[1], {1: math.nan})], rec(in_b0[0], {}), 1, 7.0).action == Action.PROMOTE


def test_state_rebuilt_from_history_gives_the_same_decisions() -> None:
    """Feed reports in order to one history, decide each; a restarted planner with the records
    read back (rungs persisted as decided) decides the next report identically."""
    asha = Asha(BUDGET, 3, 1, "min")
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0, 3.5, 0.5, 8.0]
    history: list[TrialRecord] = []
    decisions = []
    for i, v in enumerate(values):
        d = asha.decide(history, rec(i, {}), 1, v)
        decisions.append(d.action)
        history.append(rec(i, {1: v}, TrialState.PRUNED if d.action == Action.PRUNE else TrialState.RUNNING))
    assert decisions.count(Action.PROMOTE) < len(values) and decisions.count(Action.PRUNE) >= 4
    again = Asha(BudgetParam(param="steps", min=1, max=81), 3, 1, "min")
    assert again.decide(list(reversed(history)), rec(10, {}), 1, 2.0) == asha.decide(history, rec(10, {}), 1, 2.0)


def test_hyperband_brackets_by_index_in_optunas_proportions() -> None:
    hb = Asha(BUDGET, 3, None, "min")
    assert hb.brackets == 5
    assert [hb.rungs[s][0] for s in range(5)] == [1, 3, 9, 27, 81]
    counts = Counter(hb.bracket_of(i) for i in range(143))  # one cycle
    assert [counts[s] for s in range(5)] == [81, 34, 15, 8, 5]  # ceil(5 * 3**s / (s + 1)), most aggressive first
    assert {hb.bracket_of(i) for i in range(12)} >= {0, 1, 2}  # interleaved, not 81 in a row
    assert [hb.initial_budget(i) for i in range(143)] == [hb.rungs[hb.bracket_of(i)][0] for i in range(143)]
    assert Asha(BUDGET, 3, None, "min").bracket_of(1000) == hb.bracket_of(1000)


@pytest.mark.parametrize("eta", [2, 3, 4])
def test_asha_keeps_about_one_in_eta_per_rung(eta: int) -> None:
    import random

    asha = Asha(BudgetParam(min=1, max=eta**3), eta, 1, "min")
    rng = random.Random(eta)
    history: list[TrialRecord] = []
    promoted = 0
    for i in range(600):
        v = rng.random()
        d = asha.decide(history, rec(i, {}), 1, v)
        promoted += d.action == Action.PROMOTE
        history.append(rec(i, {1: v}))
    assert abs(promoted / 600 - 1 / eta) < 0.06
