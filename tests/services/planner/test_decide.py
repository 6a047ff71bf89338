"""The planner's pure decisions, fed plain events: no broker, no database."""

from spotsweep.services.planner.decide import RetryPolicy, SweepState, TrialView, decide, fill
from spotsweep.shared.messages import TrialFinished, TrialLost, TrialStarted
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


def test_fill_keeps_at_most_the_window_waiting_in_the_queue() -> None:
    big = dict(max_concurrent=100, total_trials=1000, next_index=10)
    assert fill(sweep(**big, in_flight=10, waiting=0, window=8)) == (8, False)
    assert fill(sweep(**big, in_flight=10, waiting=8, window=8)) == (0, False)  # agents must start some first
    assert fill(sweep(**big, in_flight=10, waiting=3, window=8)) == (5, False)
    assert fill(sweep(**big, in_flight=10, waiting=3, window=None)) == (90, False)


def test_started_marks_running() -> None:
    d = decide(sweep(), TrialView(TrialState.QUEUED, 1), TrialStarted(attempt=1, agent="a", **S))
    assert d.update is not None and d.update.state == TrialState.RUNNING and d.update.started


def test_completion_records_metrics() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1), finished("completed", metrics={"loss": 0.5}))
    assert d.update is not None and d.update.state == TrialState.COMPLETED and d.update.metrics == {"loss": 0.5}
    assert d.update.finished


def test_failure_is_retried_with_a_new_attempt_then_fails_for_good() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1), finished("failed", error="boom", exit_code=1))
    assert d.update is not None
    assert (d.update.state, d.update.attempt, d.update.failures) == (TrialState.PENDING, 2, 1)
    d = decide(sweep(), TrialView(TrialState.RUNNING, 2, failures=1), finished("failed", attempt=2, error="boom again"))
    assert d.update is not None
    assert (d.update.state, d.update.failures, d.update.error) == (TrialState.FAILED, 2, "boom again")


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


def started(run_id: str, redelivered: bool = False, attempt: int = 1, losses: int = 0) -> TrialStarted:
    return TrialStarted(attempt=attempt, agent="b", run_id=run_id, redelivered=redelivered, losses=losses, **S)


def test_a_second_live_run_of_an_attempt_is_stopped_and_the_first_kept() -> None:
    running = TrialView(TrialState.RUNNING, 1, run_id="r1")
    assert decide(sweep(), running, started("r1")).stop is None  # the same start event again
    d = decide(sweep(), running, started("r2"))
    assert d.update is None and d.stop is not None and (d.stop.run_id, d.stop.reason) == ("r2", "duplicate")


def test_a_redelivered_run_replaces_the_vanished_one_and_records_the_losses() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r1"), started("r2", redelivered=True, losses=2))
    assert d.stop is None and d.update is not None
    assert (d.update.state, d.update.run_id, d.update.losses) == (TrialState.RUNNING, "r2", 2)


def test_a_run_of_an_ended_trial_is_stopped() -> None:
    d = decide(sweep(), TrialView(TrialState.COMPLETED, 1, run_id="r1"), started("r9", redelivered=True))
    assert d.update is None and d.stop is not None and d.stop.reason == "ended"


def test_an_oom_is_retried_with_half_the_batch_and_twice_the_accumulation_not_as_a_failure() -> None:
    policy = RetryPolicy(max_failures=0, on_oom="halve_batch")
    view = TrialView(TrialState.RUNNING, 1, params={"lr": 0.1, "batch_size": 128, "grad_accum": 1})
    d = decide(sweep(policy=policy), view, finished("failed", failure="oom", error="CUDA out of memory"))
    assert d.update is not None and d.update.state == TrialState.PENDING and d.update.failures == 0
    assert d.update.params == {"lr": 0.1, "batch_size": 64, "grad_accum": 2}
    assert "batch_size=64, grad_accum=2" in (d.update.error or "")
    odd = TrialView(TrialState.RUNNING, 1, params={"batch_size": 3, "grad_accum": 1})
    d = decide(sweep(policy=policy), odd, finished("failed", failure="oom"))
    assert d.update is not None and d.update.state == TrialState.FAILED  # cannot halve exactly: a plain failure
    d = decide(sweep(), view, finished("failed", failure="oom"))
    assert d.update is not None and d.update.params is None  # on_oom: fail (the default) changes no params


def test_trials_past_their_total_time_or_killing_their_agents_are_not_retried() -> None:
    for failure in ("timeout", "lost"):
        d = decide(sweep(max_failures=5), TrialView(TrialState.RUNNING, 1), finished("failed", failure=failure))
        assert d.update is not None and d.update.state == TrialState.FAILED
    d = decide(sweep(max_failures=5), TrialView(TrialState.RUNNING, 1), finished("failed", failure="stalled"))
    assert d.update is not None and d.update.state == TrialState.PENDING  # a hang may be transient


def test_running_time_is_added_up_and_a_new_attempt_starts_with_no_losses() -> None:
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1), finished("preempted", duration=12.5))
    assert d.update is not None and d.update.add_seconds == 12.5 and d.update.losses == 0


def test_a_lost_run_puts_the_trial_back_to_queued_with_the_reason() -> None:
    lost = TrialLost(attempt=1, agent="a", run_id="r1", reason="RabbitMQ's consumer_timeout ...", **S)
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r1"), lost)
    assert d.update is not None and d.update.state == TrialState.QUEUED and "consumer_timeout" in (d.update.error or "")
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r2"), lost)  # a later run already started
    assert d.update is None and d.stop is None  # fenced off: r2 is the run that counts
    d = decide(sweep(), TrialView(TrialState.QUEUED, 1, run_id="r1"), lost)  # the same notice, delivered again
    assert d.update is not None and d.update.state == TrialState.QUEUED and d.update.add_seconds == 0


def test_a_start_of_an_earlier_attempt_is_stopped_as_stale() -> None:
    # Attempt 1 was preempted and its agent died before the ack: the broker hands attempt 1 out again.
    for state in (TrialState.PENDING, TrialState.QUEUED, TrialState.RUNNING):
        d = decide(sweep(), TrialView(state, 2, run_id="r2"), started("r1-again", redelivered=True, attempt=1))
        assert d.update is None and d.stop is not None
        assert (d.stop.attempt, d.stop.run_id, d.stop.reason) == (1, "r1-again", "stale")
    d = decide(sweep(), TrialView(TrialState.COMPLETED, 2, run_id="r2"), started("r1-again", attempt=1))
    assert d.stop is not None and d.stop.reason == "ended"  # the trial ended meanwhile
    assert decide(sweep(), TrialView(TrialState.QUEUED, 2), started("", attempt=1)).stop is None  # no run id: nothing to stop


def test_the_end_of_a_run_that_does_not_count_changes_nothing() -> None:
    # A duplicate copy r2 (stopped) reports before its stop arrived; or the vanished r1 reports after r2 replaced it.
    running = TrialView(TrialState.RUNNING, 1, run_id="r1")
    for outcome in ("completed", "preempted", "failed"):
        d = decide(sweep(), running, finished(outcome, run_id="r2", metrics={"loss": 0.1}, duration=5.0))
        assert d.update is None and d.stop is None
    d = decide(sweep(), running, finished("completed", run_id="r1", metrics={"loss": 0.2}))
    assert d.update is not None and d.update.state == TrialState.COMPLETED  # the run that counts
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r1"), finished("preempted"))  # an older agent: no run id
    assert d.update is not None and d.update.state == TrialState.PENDING


def test_a_lost_run_adds_its_running_time_once() -> None:
    lost = TrialLost(attempt=1, agent="a", run_id="r1", reason="connection closed", duration=42.5, **S)
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r1"), lost)
    assert d.update is not None and d.update.state == TrialState.QUEUED and d.update.add_seconds == 42.5
    d = decide(sweep(), TrialView(TrialState.QUEUED, 1, run_id="r1"), lost)  # redelivered: not counted again
    assert d.update is not None and d.update.add_seconds == 0
    old = TrialLost(attempt=1, agent="a", run_id="r1", reason="connection closed", **S)  # an agent that sends no duration
    d = decide(sweep(), TrialView(TrialState.RUNNING, 1, run_id="r1"), old)
    assert d.update is not None and d.update.add_seconds == 0


def test_a_failure_that_repeats_the_last_one_with_no_step_between_is_not_retried() -> None:
    """A promoted ASHA trial whose script refuses its checkpoint fails the same way each time: once is enough."""
    refusal = "refusing to mix runs: the checkpoint was written with other flags (lr_horizon: 3 in the checkpoint, 9 now)"
    first = decide(sweep(max_failures=3), TrialView(TrialState.RUNNING, 2, last_step=3),
                   finished("failed", attempt=2, failure="exit", error=refusal))
    assert first.update is not None and first.update.state == TrialState.PENDING  # one failure says little
    again = TrialView(TrialState.RUNNING, 3, failures=1, error=refusal, last_step=3)
    d = decide(sweep(max_failures=3), again, finished("failed", attempt=3, failure="exit", error=refusal))
    assert d.update is not None and (d.update.state, d.update.failures) == (TrialState.FAILED, 2)
    # A crash that trained on past where the trial was, or that says something else, is retried as before.
    for moved_on in (dict(error=refusal, last_step=7), dict(error="CUDA error: an illegal memory access")):
        d = decide(sweep(max_failures=3), again, finished("failed", attempt=3, failure="exit", **moved_on))
        assert d.update is not None and d.update.state == TrialState.PENDING, moved_on


def test_a_kill_the_agent_did_not_send_is_retried_as_a_crash_never_with_half_the_batch() -> None:
    policy = RetryPolicy(max_failures=1, on_oom="halve_batch")
    view = TrialView(TrialState.RUNNING, 1, params={"batch_size": 128, "grad_accum": 1})
    d = decide(sweep(policy=policy), view, finished("failed", failure="killed", error="killed by signal 9, not by the agent"))
    assert d.update is not None and d.update.state == TrialState.PENDING and d.update.failures == 1
    assert d.update.params is None  # unchanged
