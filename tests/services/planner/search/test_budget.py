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
