"""ASHA's promotion rule of the paper (Li et al., "A System for Massively
Parallel Hyperparameter Tuning"), fed plain rung events: a trial ending its
run at a rung waits; when a slot frees, a waiting trial in the best
floor(n/eta) of the n its rung has seen is promoted, top rung first."""

from __future__ import annotations

import math

from spotsweep.services.planner.search import Action, Asha, Search, TrialRecord
from spotsweep.shared.spec import BudgetParam, parse_spec
from spotsweep.shared.states import TrialState

BUDGET = BudgetParam(param="steps", min=1, max=9)
P = TrialState.PAUSED


def rec(index: int, rungs: dict[int, float], state: TrialState = P, steps: int | None = None) -> TrialRecord:
    return TrialRecord(index, {"steps": steps if steps is not None else max(rungs, default=1)}, state, rungs=rungs)


def paper() -> Asha:
    return Asha(BUDGET, 3, 1, "min", "paper")


def test_a_run_that_ends_at_a_rung_waits_there() -> None:
    d = paper().decide([], rec(0, {}, TrialState.RUNNING), 1, 0.5)
    assert (d.action, d.rung) == (Action.PAUSE, 1)
    assert paper().decide([], rec(0, {}, TrialState.RUNNING), 1, math.nan).action == Action.PRUNE
    assert paper().decide([], rec(0, {1: 1.0, 3: 1.0}, TrialState.RUNNING), 9, 0.5).action == Action.COMPLETE


def test_nobody_is_promoted_before_the_rung_has_seen_eta_trials() -> None:
    asha = paper()
    assert asha.promotions([rec(0, {1: 0.1})], 4) == []
    assert asha.promotions([rec(0, {1: 0.1}), rec(1, {1: 0.2})], 4) == []
    three = asha.promotions([rec(0, {1: 0.3}), rec(1, {1: 0.1}), rec(2, {1: 0.2})], 4)
    assert [(p.index, p.rung, p.budget) for p in three] == [(1, 1, 3)]  # the best 1 of 3
    assert "best 1 of 3" in three[0].reason


def test_a_trial_left_out_is_promoted_later_when_a_slot_frees_and_the_rung_grew() -> None:
    asha = paper()
    history = [rec(0, {1: 0.1, 3: 0.1}, TrialState.RUNNING, steps=3), rec(1, {1: 0.2}), rec(2, {1: 0.9})]
    assert asha.promotions(history, 1) == []  # the best 1 of 3 (trial 0) was promoted already
    history += [rec(3, {1: 0.8}), rec(4, {1: 0.7}), rec(5, {1: 0.6})]
    late = asha.promotions(history, 1)  # 6 seen: the best 2; trial 1 now ranks
    assert [(p.index, p.budget) for p in late] == [(1, 3)]


def test_the_top_rung_goes_first_and_slots_limit_how_many() -> None:
    asha = paper()
    history = [rec(i, {1: 0.1 + i / 100, 3: 0.1 + i / 10}) for i in range(3)]  # three waiting at rung 3
    history += [rec(i, {1: 0.5 + i / 100}) for i in range(3, 12)]  # nine waiting at rung 1
    got = asha.promotions(history, 2)
    assert [(p.index, p.rung, p.budget) for p in got] == [(0, 3, 9), (3, 1, 3)]
    assert len(asha.promotions(history, 10)) == 2  # 1 of rung 3 (3 seen), 1 of rung 1 (12 seen, 3 went on already)


def test_a_rung_never_sends_on_more_than_its_quota_whatever_the_order() -> None:
    """Values that improve one by one: the paper's rule alone would promote each
    newcomer (it ranks in the best third); the quota keeps it to floor(n / 3)."""
    asha = paper()
    history: list[TrialRecord] = []
    for i in range(12):
        history.append(rec(i, {1: 1.0 - i / 100}))
        for p in asha.promotions(history, 4):
            history[p.index] = rec(p.index, history[p.index].rungs, TrialState.RUNNING, steps=p.budget)
    assert sum(r.params["steps"] > 1 for r in history) == 12 // 3


def test_max_mode_and_non_finite_values_do_not_rank() -> None:
    asha = Asha(BUDGET, 3, 1, "max", "paper")
    history = [rec(0, {1: 0.3}), rec(1, {1: 0.9}), rec(2, {1: math.nan}), rec(3, {1: 0.5})]
    assert [p.index for p in asha.promotions(history, 5)] == [1]


def test_at_the_end_a_rung_that_promoted_no_one_sends_its_best_on() -> None:
    asha = paper()
    history = [rec(0, {1: 0.1, 3: 0.2}), rec(1, {1: 0.2, 3: 0.1}), rec(2, {1: 0.9})]
    assert asha.promotions(history, 1) == []
    assert [(p.index, p.budget) for p in asha.promotions(history, 1, final=True)] == [(1, 9)]
    done = [rec(0, {1: 0.1, 3: 0.2}, TrialState.COMPLETED, steps=9), rec(1, {1: 0.2, 3: 0.1}), rec(2, {1: 0.9})]
    assert asha.promotions(done, 1, final=True) == []  # rung 3 sent one on already


def test_brackets_rank_apart() -> None:
    asha = Asha(BudgetParam(param="steps", min=1, max=27), 3, 2, "min", "paper")
    b0 = [i for i in range(12) if asha.bracket_of(i) == 0][:3]
    b1 = [i for i in range(12) if asha.bracket_of(i) == 1][:2]
    history = [rec(i, {1: 0.5}) for i in b0] + [rec(i, {3: 0.1}) for i in b1]
    assert [p.index for p in asha.promotions(history, 5)] == [b0[0]]  # bracket 1's rung 3 has seen only 2


def test_the_spec_default_is_the_papers_rule_and_async_keeps_rays() -> None:
    base = {"name": "s", "command": ["t", "{steps}"], "metric": {"name": "loss"}, "space": {"x": [1, 2, 3]}}
    spec = parse_spec({**base, "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}}})
    search = Search(spec)
    assert search.waits
    assert search.on_run_end([], rec(0, {}, TrialState.RUNNING), 0.5).action == Action.PAUSE
    ray = Search(parse_spec({**base, "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9},
                                                  "promotion": "async"}}))
    assert not ray.waits and ray.on_run_end([], rec(0, {}, TrialState.RUNNING), 0.5).action == Action.PROMOTE
    hyperband = Search(parse_spec({**base, "early_stop": {"type": "hyperband", "budget": {"param": "steps", "min": 1,
                                                                                             "max": 9}}}))
    assert hyperband.waits
    running = Search(parse_spec({**base, "command": ["t"], "early_stop": {"type": "hyperband",
                                                                          "budget": {"min": 1, "max": 9}}}))
    assert not running.waits  # without a budget parameter a trial cannot wait: decided on arrival
