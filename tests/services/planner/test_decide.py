"""The planner's pure decisions, fed plain events: no broker, no database."""

from spotsweep.services.planner.decide import SweepState, TrialView, decide, fill
from spotsweep.shared.messages import TrialFinished, TrialStarted
from spotsweep.shared.states import TrialState

S = dict(sweep_id="s", trial_id="s.0")


def sweep(**kw: object) -> SweepState:
    base = dict(max_concurrent=2, total_trials=5, next_index=2, in_flight=2, max_failures=1)
    base.update(kw)
    return SweepState(**base)  # type: ignore[arg-type]


def finished(outcome: str, attempt: int = 1, **kw: object) -> TrialFinished:
    return TrialFinished(attempt=attempt, outcome=outcome, **S, **kw)  # type: ignore[arg-type]


def test_fill_respects_max_concurrent_and_the_grid_end() -> None:
    assert fill(sweep(next_index=0, in_flight=0)) == (2, False)
    assert fill(sweep(next_index=4, in_flight=0)) == (1, False)
    assert fill(sweep(next_index=5, in_flight=0)) == (0, True)
    assert fill(sweep(next_index=5, in_flight=1)) == (0, False)
    assert fill(sweep(next_index=0, in_flight=0, active=False)) == (0, False)


def test_started_marks_running_without_launching() -> None:
    d = decide(sweep(), TrialView(TrialState.QUEUED, 1), TrialStarted(attempt=1, agent="a", **S))
    assert d.update is not None and d.update.state == TrialState.RUNNING and d.update.started
    assert d.launch == 0


def test_completion_frees_a_slot_and_records_metrics() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1), finished("completed", metrics={"loss": 0.5}))
    assert d.update is not None and d.update.state == TrialState.COMPLETED and d.update.metrics == {"loss": 0.5}
    assert d.launch == 1 and not d.sweep_done


def test_last_completion_ends_the_sweep() -> None:
    d = decide(sweep(next_index=5, in_flight=1), TrialView(TrialState.RUNNING, 1), finished("completed"))
    assert d.sweep_done and d.launch == 0


def test_failure_is_retried_with_a_new_attempt_then_fails_for_good() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1), finished("failed", error="boom", exit_code=1))
    assert d.update is not None
    assert (d.update.state, d.update.attempt, d.update.failures) == (TrialState.PENDING, 2, 1)
    assert d.launch == 0  # the retry keeps its slot
    d = decide(sweep(), TrialView(TrialState.RUNNING, 2, failures=1), finished("failed", attempt=2, error="boom again"))
    assert d.update is not None
    assert (d.update.state, d.update.failures, d.update.error) == (TrialState.FAILED, 2, "boom again")
    assert d.launch == 1


def test_preemption_does_not_spend_the_retry_budget() -> None:
    d = decide(sweep(max_failures=0), TrialView(TrialState.RUNNING, 3, preemptions=2), finished("preempted", attempt=3))
    assert d.update is not None
    assert (d.update.state, d.update.attempt, d.update.failures, d.update.preemptions) == (TrialState.PENDING, 4, 0, 3)


def test_stale_attempts_and_terminal_trials_change_nothing() -> None:
    assert decide(sweep(), TrialView(TrialState.RUNNING, 2), finished("completed", attempt=1)).update is None
    assert decide(sweep(), TrialView(TrialState.COMPLETED, 1), finished("failed")).update is None
    assert decide(sweep(), TrialView(TrialState.CANCELLED, 1), TrialStarted(attempt=1, agent="a", **S)).update is None


def test_duplicate_start_is_a_no_op() -> None:
    assert decide(sweep(), TrialView(TrialState.RUNNING, 1), TrialStarted(attempt=1, agent="b", **S)).update is None
