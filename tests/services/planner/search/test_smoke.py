"""The smoke stage: hold the sweep until the smoke trials pass; stop it when one fails."""

from __future__ import annotations

from spotsweep.services.planner.search import TrialRecord, smoke_stage
from spotsweep.shared.spec import Smoke
from spotsweep.shared.states import TrialState

SMOKE = Smoke(trials=2, budget=2)
OBJ = ["val_loss"]


def rec(k: int, state: TrialState, values: tuple[float, ...] | None = None, failures: int = 0, error: str | None = None) -> TrialRecord:
    return TrialRecord(k, {}, state, values, failures=failures, error=error)


def test_no_smoke_releases_everything() -> None:
    d = smoke_stage(None, [], OBJ)
    assert (d.hold, d.passed, d.launch) == (False, True, ())


def test_first_launch_only_the_smoke_trials_then_hold() -> None:
    assert smoke_stage(SMOKE, [], OBJ).launch == (0, 1) and smoke_stage(SMOKE, [], OBJ).hold
    running = [rec(0, TrialState.RUNNING), rec(1, TrialState.QUEUED)]
    d = smoke_stage(SMOKE, running, OBJ)
    assert (d.hold, d.launch, d.error) == (True, (), None)
    d = smoke_stage(SMOKE, [rec(0, TrialState.COMPLETED, (1.0,)), rec(1, TrialState.RUNNING)], OBJ)
    assert d.hold and not d.passed


def test_all_completed_with_the_objective_releases_the_rest() -> None:
    d = smoke_stage(SMOKE, [rec(1, TrialState.COMPLETED, (1.0,)), rec(0, TrialState.COMPLETED, (2.0,))], OBJ)
    assert (d.hold, d.passed, d.error) == (False, True, None)


def test_a_failure_stops_the_sweep_with_its_error() -> None:
    trials = [rec(0, TrialState.COMPLETED, (1.0,)),
              rec(1, TrialState.PENDING, failures=1, error="Traceback...\nRuntimeError: CUDA out of memory\n")]
    d = smoke_stage(SMOKE, trials, OBJ)
    assert d.failed and d.hold
    assert d.error == "smoke trial 1 failed: RuntimeError: CUDA out of memory; the sweep stopped before its other trials"
    d = smoke_stage(SMOKE, [rec(0, TrialState.COMPLETED, None), rec(1, TrialState.COMPLETED, (1.0,))], OBJ)
    assert d.error == "smoke trial 0 completed without reporting val_loss; the sweep stopped before its other trials"
    assert smoke_stage(SMOKE, [rec(0, TrialState.CANCELLED, error="cancelled by user")], OBJ).error \
        == "smoke trial 0 was cancelled: cancelled by user; the sweep stopped before its other trials"


def test_a_preempted_smoke_trial_is_not_a_failure() -> None:
    d = smoke_stage(SMOKE, [rec(0, TrialState.PENDING, failures=0, error="preempted"), rec(1, TrialState.RUNNING)], OBJ)
    assert not d.failed and d.hold


def test_a_smoke_trial_whose_objective_is_nan_or_infinite_fails_the_stage() -> None:
    for value, shown in ((float("nan"), "val_loss = nan"), (float("inf"), "val_loss = inf")):
        d = smoke_stage(SMOKE, [rec(0, TrialState.COMPLETED, (value,)), rec(1, TrialState.COMPLETED, (1.0,))], OBJ)
        assert d.failed and not d.passed
        assert d.error == (f"smoke trial 0 completed with {shown}: not a finite number (did the run diverge?); "
                           "the sweep stopped before its other trials")
