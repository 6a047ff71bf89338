"""How a sweep ends: failed when every trial failed, with the first one's error."""

from __future__ import annotations

from spotsweep.services.planner.outcome import Outcomes, sweep_end


def test_a_sweep_with_one_completed_trial_completed() -> None:
    assert sweep_end(Outcomes({"completed": 1, "failed": 9}, "oom")) == ("completed", None)
    assert sweep_end(Outcomes({"pruned": 2, "failed": 1}, "oom")) == ("completed", None)
    assert sweep_end(Outcomes({})) == ("completed", None)  # nothing to run: nothing failed
    assert sweep_end(Outcomes({"cancelled": 3})) == ("completed", None)


def test_a_sweep_whose_every_trial_failed_failed_with_the_first_error() -> None:
    assert sweep_end(Outcomes({"failed": 4}, "exit 127: train.py not found")) == (
        "failed", "every trial failed (4); the first one: exit 127: train.py not found")
    assert sweep_end(Outcomes({"failed": 5, "cancelled": 1})) == ("failed", "every trial failed (5); the first one: no error recorded")
