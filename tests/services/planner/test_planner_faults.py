"""The planner's side of faults, handlers called directly over the in-memory repositories:
duplicate and redelivered runs, OOM retries that halve the batch, time limits
carried to agents, and lost runs reported back."""

from __future__ import annotations

from typing import Any

from spotsweep.shared.messages import StopTrial, TrialLost

SPEC: dict[str, Any] = {
    "name": "faults",
    "command": ["python", "train.py", "--bs", "{batch_size}", "--accum", "{grad_accum}"],
    "metric": {"name": "loss"},
    "space": {"batch_size": [64, 128]},
    "max_concurrent": 1,
    "retries": {"max_failures": 0, "max_lost": 4, "on_oom": "halve_batch"},
    "timeout": {"stall": "10m", "total": "2h"},
    "resources": {"gpus": 0, "class": "cpu"},
}


def test_trial_messages_carry_the_limits_the_agent_enforces(h: Any) -> None:
    h.submit(SPEC)
    msg = h.published(1)[0]
    assert (msg.max_lost, msg.stall_timeout, msg.total_timeout, msg.elapsed) == (4, 600.0, 7200.0, 0.0)
    assert msg.params == {"batch_size": 64, "grad_accum": 1}  # the accumulation to double is filled in


def test_a_duplicate_run_is_stopped_and_a_redelivered_one_adopted(h: Any) -> None:
    h.submit(SPEC)
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    h.start(msg, run_id="r1")  # the same start event again: nothing to say
    assert h.told(timeout=0.3) is None
    h.start(msg, run_id="r2", agent="b")  # a second live copy
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.run_id, stop.reason, stop.attempt) == ("r2", "duplicate", 1)
    h.start(msg, run_id="r3", agent="c", redelivered=True, losses=1)  # r1's agent vanished
    assert h.told(timeout=0.3) is None
    row = h.trial(msg.trial_id)
    assert (row["state"], row["agent"], row["losses"]) == ("running", "c", 1)
    h.finish(msg, "completed", run_id="r3", metrics={"loss": 0.5})
    h.start(msg, run_id="r4", redelivered=True)  # r3 finished but its ack was lost with its agent
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.run_id, stop.reason) == ("r4", "ended")


def test_an_oom_retry_runs_with_half_the_batch_and_the_planner_records_it(h: Any) -> None:
    h.submit({**SPEC, "space": {"batch_size": [128]}})
    first = h.published(1)[0]
    h.start(first, run_id="r1")
    h.finish(first, "failed", failure="oom", error="torch.OutOfMemoryError: CUDA out of memory", duration=30.0)
    retry = h.published(1)[0]
    assert (retry.attempt, retry.params) == (2, {"batch_size": 64, "grad_accum": 2})
    assert retry.argv == ["python", "train.py", "--bs", "64", "--accum", "2"]
    assert retry.elapsed == 30.0
    row = h.trial(first.trial_id)
    assert row["state"] == "queued" and row["failures"] == 0 and "batch_size=64" in row["error"]
    assert row["params"] == {"batch_size": 64, "grad_accum": 2} and row["run_seconds"] == 30.0


def test_a_lost_run_shows_the_reason_and_the_trial_waits_queued(h: Any) -> None:
    h.submit(SPEC)
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    h.event(TrialLost(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, agent="a", run_id="r1",
                      reason="RabbitMQ's consumer_timeout closed the delivery"))
    row = h.trial(msg.trial_id)
    assert row["state"] == "queued" and "consumer_timeout" in row["error"]
    assert h.published(timeout=0.3) == []  # the broker redelivers it: the planner publishes nothing


def test_a_trial_that_kills_its_agents_fails_without_a_retry_and_the_sweep_goes_on(h: Any) -> None:
    h.submit({**SPEC, "retries": {"max_failures": 3, "on_oom": "halve_batch"}})
    msg = h.published(1)[0]
    h.finish(msg, "failed", failure="lost", error="lost with its agent 5 times")
    row = h.trial(msg.trial_id)
    assert (row["state"], row["failures"]) == ("failed", 1)
    assert h.published(1)[0].index == 1


def test_a_run_of_an_earlier_attempt_is_stopped_and_a_run_that_does_not_count_is_ignored(h: Any) -> None:
    h.submit(SPEC)
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    h.start(msg, run_id="r2", agent="b")  # a duplicate copy, told to stop...
    assert isinstance(h.told(), StopTrial)
    h.finish(msg, "preempted", run_id="r2", agent="b", duration=5.0)  # ...which was preempted before the stop arrived
    row = h.trial(msg.trial_id)
    assert (row["state"], row["attempts"], row["preemptions"], row["run_seconds"]) == ("running", 1, 0, 0.0)
    assert h.published(timeout=0.3) == []  # no second attempt while r1 goes on
    h.finish(msg, "preempted", run_id="r1", duration=60.0)  # r1 is preempted: attempt 2
    second = h.published(1)[0]
    assert second.attempt == 2
    # r1's agent died before its ack: the broker hands attempt 1 out again.
    h.start(msg, run_id="r1-again", agent="c", redelivered=True)
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.attempt, stop.run_id, stop.reason) == (1, "r1-again", "stale")
    h.start(second, run_id="s1")
    h.finish(second, "completed", run_id="s1", metrics={"loss": 0.25})
    assert h.trial(msg.trial_id)["state"] == "completed"


def test_the_time_of_a_lost_run_counts_towards_the_total_timeout(h: Any) -> None:
    h.submit(SPEC)
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    lost = TrialLost(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, agent="a", run_id="r1",
                     reason="connection closed", duration=100.0)
    h.event(lost)
    h.event(lost, redelivered=True)  # the same notice again: counted once
    assert h.trial(msg.trial_id)["run_seconds"] == 100.0
    h.start(msg, run_id="r2", agent="b", redelivered=True, losses=1)
    h.finish(msg, "preempted", run_id="r2", agent="b", duration=50.0)
    again = h.published(1)[0]
    assert (again.attempt, again.elapsed) == (2, 150.0)  # the agent kills it at timeout.total less this
