"""How a sweep ends: failed when no trial completed, with the first failed one's error."""

from __future__ import annotations

from spotsweep.services.planner.outcome import Outcomes, sweep_end


def test_a_sweep_with_one_completed_trial_completed() -> None:
    assert sweep_end(Outcomes({"completed": 1, "failed": 9}, "oom")) == ("completed", None)
    assert sweep_end(Outcomes({"completed": 1, "pruned": 8})) == ("completed", None)
    assert sweep_end(Outcomes({})) == ("completed", None)  # nothing to run: nothing failed


def test_a_sweep_with_no_completed_trial_failed_saying_what_became_of_them() -> None:
    """ASHA whose promoted trials all fail: the rest were pruned, and nothing reached the top."""
    assert sweep_end(Outcomes({"pruned": 2, "failed": 1, "completed": 0}, "refusing to mix runs")) == (
        "failed", "no trial completed (1 failed, 2 pruned); the first failure: refusing to mix runs")
    assert sweep_end(Outcomes({"cancelled": 3})) == ("failed", "no trial completed (3 cancelled)")


def test_a_sweep_whose_every_trial_failed_failed_with_the_first_error() -> None:
    assert sweep_end(Outcomes({"failed": 4}, "exit 127: train.py not found")) == (
        "failed", "every trial failed (4); the first one: exit 127: train.py not found")
    assert sweep_end(Outcomes({"failed": 5, "cancelled": 1})) == ("failed", "every trial failed (5); the first one: no error recorded")
