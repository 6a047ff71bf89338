"""Budget caps stop launches before they would be passed."""

from __future__ import annotations

from spotsweep.services.planner.search import Usage, committed, estimate_trial_seconds, may_launch
from spotsweep.shared.spec import Budget, Pricing

PRICING = Pricing(gpu_hour=0.9, on_demand_gpu_hour=4.1)


def test_no_budget_always_launches() -> None:
    assert may_launch(None, None, Usage(launched=10**6, gpu_seconds=1e12, elapsed_seconds=1e9)).ok


def test_max_trials() -> None:
    budget = Budget(max_trials=3)
    assert may_launch(budget, None, Usage(2, 0, 0)).ok
    verdict = may_launch(budget, None, Usage(3, 0, 0))
    assert not verdict.ok and verdict.reason == "budget.max_trials: 3 trial(s) launched, the cap is 3"


def test_gpu_hours_count_used_in_flight_and_the_next_trial() -> None:
    budget = Budget(max_gpu_hours=10)
    hour = 3600.0
    # 8 GPU-h used, trials take 1 h on 1 GPU, nothing in flight: one more fits (9 <= 10).
    assert may_launch(budget, None, Usage(8, 8 * hour, 0, trial_seconds=hour)).ok
    # Two running, 30 min in: 1 GPU-h still expected from them; 8 + 1 + 1 = 10 fits, 8.5 + 1 + 1 does not.
    in_flight = committed([(hour, hour / 2), (hour, hour / 2)], gpus=1)
    assert in_flight == hour
    assert may_launch(budget, None, Usage(10, 8 * hour, 0, trial_seconds=hour, committed_gpu_seconds=in_flight)).ok
    verdict = may_launch(budget, None, Usage(10, 8.5 * hour, 0, trial_seconds=hour, committed_gpu_seconds=in_flight))
    assert not verdict.ok
    assert verdict.reason == "budget.max_gpu_hours: 8.50 GPU-h used, 10.50 expected with one more trial, the cap is 10"
    # 4-GPU trials of 30 min: 2 GPU-h each.
    assert not may_launch(budget, None, Usage(4, 8.5 * hour, 0, trial_seconds=hour / 2, gpus=4)).ok
    # No estimate yet: only what was used counts.
    assert may_launch(budget, None, Usage(4, 9.9 * hour, 0)).ok
    assert not may_launch(budget, None, Usage(4, 10 * hour, 0)).ok


def test_cost_cap_uses_the_price() -> None:
    budget = Budget(max_cost=9.0)  # 10 GPU-h at 0.9
    assert may_launch(budget, PRICING, Usage(1, 8 * 3600, 0, trial_seconds=3600)).ok
    verdict = may_launch(budget, PRICING, Usage(1, 9.5 * 3600, 0, trial_seconds=3600))
    assert not verdict.ok and verdict.reason == "budget.max_cost: 8.55 spent, 9.45 expected with one more trial, the cap is 9"


def test_wall_time_refuses_a_trial_that_could_not_finish() -> None:
    budget = Budget(wall_time=3600)
    assert may_launch(budget, None, Usage(1, 0, 3000, trial_seconds=600)).ok
    verdict = may_launch(budget, None, Usage(1, 0, 3100, trial_seconds=600))
    assert not verdict.ok and verdict.reason.startswith("budget.wall_time: 3100s elapsed, a trial takes about 600s")
    assert not may_launch(budget, None, Usage(1, 0, 3600)).ok


def test_estimates_and_remaining() -> None:
    assert estimate_trial_seconds([]) is None
    assert estimate_trial_seconds([10, 20, 1000]) == 20
    assert committed([(None, 5.0)], 1) == 0.0  # no estimate: nothing committed
    # Two running (30 s and 150 s into 100 s runs), two waiting, 2 GPUs each.
    assert committed([(100.0, 30.0), (100.0, 150.0), (100.0, 0.0), (100.0, 0.0)], 2) == 2 * (70 + 0 + 200)


def test_successive_halving_is_estimated_per_budget_unit() -> None:
    from spotsweep.services.planner.search import committed, estimate_unit_seconds

    # Ended trials as (seconds over all attempts, budget reached): 9 pruned at 1 unit, one completed at 9 units.
    ended = [(100.0, 1.0)] * 9 + [(900.0, 9.0)]
    assert estimate_unit_seconds(ended) == 100.0  # not the median trial, nor the full-budget one
    assert estimate_unit_seconds([]) is None and estimate_unit_seconds([(5.0, 0.0)]) is None
    # In flight: a run expected to take 300 s that ran 100, one waiting for 100 s, one with no estimate.
    assert committed([(300.0, 100.0), (100.0, 0.0), (None, 50.0)], gpus=2) == 2 * (200 + 100)


def test_a_promotion_is_checked_against_every_cap_but_max_trials() -> None:
    from spotsweep.services.planner.search import may_continue

    hour = 3600.0
    budget = Budget(max_trials=3, max_gpu_hours=10)
    assert may_continue(budget, None, Usage(3, 4 * hour, 0, trial_seconds=6 * hour)).ok  # 3 trials launched: still fine
    verdict = may_continue(budget, None, Usage(3, 4 * hour, 0, trial_seconds=7 * hour))
    assert not verdict.ok
    assert verdict.reason == "budget.max_gpu_hours: 4.00 GPU-h used, 11.00 expected with the promotion, the cap is 10"
    verdict = may_continue(Budget(wall_time=3600), None, Usage(1, 0, 3000, trial_seconds=900))
    assert verdict.reason.startswith("budget.wall_time: 3000s elapsed, the promotion takes about 900s")
    assert may_continue(None, None, Usage(1, 1e12, 1e9, trial_seconds=1e9)).ok


def test_max_steps_counts_trained_in_flight_and_the_next_trials_steps() -> None:
    budget = Budget(max_steps=40)
    # 27 steps trained, 9 still to train in flight: a 3-step trial fits (39), a 9-step one would pass 40.
    assert may_launch(budget, None, Usage(5, 0, 0, steps=27, committed_steps=9, trial_steps=3)).ok
    verdict = may_launch(budget, None, Usage(5, 0, 0, steps=27, committed_steps=9, trial_steps=9))
    assert not verdict.ok
    assert verdict.reason == "budget.max_steps: 27 step(s) trained, 45 expected with one more trial, the cap is 40"
    # No estimate yet (no trial completed): only what was trained counts, and reaching the cap stops launches.
    assert may_launch(budget, None, Usage(5, 0, 0, steps=39)).ok
    assert not may_launch(budget, None, Usage(5, 0, 0, steps=40)).ok


def test_a_promotion_is_charged_the_steps_it_adds() -> None:
    from spotsweep.services.planner.search import may_continue

    budget = Budget(max_trials=3, max_steps=30)
    assert may_continue(budget, None, Usage(3, 0, 0, steps=21, trial_steps=9)).ok  # 30: at the cap, not past it
    verdict = may_continue(budget, None, Usage(3, 0, 0, steps=22, trial_steps=9))
    assert verdict.reason == "budget.max_steps: 22 step(s) trained, 31 expected with the promotion, the cap is 30"


def test_a_trials_steps_are_its_budget_reached_or_its_reported_steps() -> None:
    from spotsweep.services.planner.search import committed_steps, estimate_trial_steps, trial_steps

    # Successive halving with a budget parameter: the budget reached, known exactly.
    assert trial_steps(9, 3, 7, in_flight=False, started=True) == (9, 0)  # ended, or waiting at rung 9
    assert trial_steps(9, 3, 7, in_flight=True, started=True) == (3, 6)  # promoted from 3, resumes to 9
    assert trial_steps(1, 0, 0, in_flight=True, started=False) == (0, 1)  # a new trial, its first rung
    assert trial_steps(9, 0, 0, in_flight=False, started=False) == (0, 0)  # cancelled before it started
    # Without one: the highest step the trial reported; what a run in flight has left is estimated.
    assert trial_steps(None, 0, 120, in_flight=False, started=True) == (120, 0)
    assert trial_steps(None, 0, 20, in_flight=True, started=True) == (20, None)
    assert estimate_trial_steps([]) is None and estimate_trial_steps([100, 120, 5000]) == 120
    assert committed_steps([(20, None), (0, None), (3, 6)], per_trial=100) == 80 + 100 + 6
    assert committed_steps([(20, None), (500, None)], per_trial=None) == 0  # no estimate yet; past it: nothing left
