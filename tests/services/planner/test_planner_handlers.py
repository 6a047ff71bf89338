"""Planner handlers called directly, over the in-memory repositories and broker; over a real
PostgreSQL, a sweep run to its end, the outbox a crashed planner left, and a redelivery."""

from __future__ import annotations

import json
import queue
from typing import Any

import pytest

from spotsweep.services.planner.handlers import handle_event, handle_sweep_message, publish_pending
from spotsweep.shared import topology
from spotsweep.shared.broker.dispatch import run_handler
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.errors import DecodeError, RetryableError
from spotsweep.shared.messages import TrialFinished, TrialMessage, TrialStarted, decode, encode
from spotsweep.shared.middleware import Backoff

SPEC: dict[str, Any] = {
    "name": "grid",
    "command": ["python", "train.py", "--lr", "{lr}", "--layers", "{layers}"],
    "metric": {"name": "val_loss", "mode": "min"},
    "space": {"lr": [0.001, 0.01], "layers": {"type": "int", "low": 1, "high": 3}},
    "max_concurrent": 2,
    "retries": {"max_failures": 1},
    "resources": {"gpus": 0, "class": "cpu"},
}
ON_PG = pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL


def submit(h: Any, delivery: Any, spec: dict[str, Any] | None = None, sweep_id: str = "sw1-000000a0") -> Any:
    return h.submit(spec or SPEC, sweep_id)


def finish(h: Any, delivery: Any, msg: TrialMessage, outcome: str = "completed", **kw: Any) -> Any:
    return h.finish(msg, outcome, **kw)


def test_submission_launches_max_concurrent_trials_with_rendered_commands(h: Any, delivery: Any) -> None:
    d = submit(h, delivery)
    assert d.settled == "ack"
    sweep = h.sweep("sw1-000000a0")
    assert (sweep["state"], sweep["total_trials"], sweep["next_index"]) == ("running", 6, 2)
    msgs = h.published(2)
    assert [m.argv for m in msgs] == [
        ["python", "train.py", "--lr", "0.001", "--layers", "1"],
        ["python", "train.py", "--lr", "0.001", "--layers", "2"],
    ]
    assert all(m.attempt == 1 and m.metric == "val_loss" for m in msgs)
    assert set(h.states("sw1-000000a0").values()) == {"queued"}
    assert h.published() == []  # no more than max_concurrent in flight


@ON_PG
def test_each_ending_trial_launches_the_next_until_the_sweep_completes(h: Any, delivery: Any) -> None:
    submit(h, delivery)
    inflight = h.published(2)
    done = 0
    while inflight:
        msg = inflight.pop(0)
        handle_event(delivery(encode(TrialStarted(sweep_id="sw1-000000a0", trial_id=msg.trial_id, attempt=1, agent="a"))), h.deps)
        assert finish(h, delivery, msg, metrics={"val_loss": 1.0 / (msg.index + 1)}).settled == "ack"
        done += 1
        inflight += h.published(1 if done <= 4 else 0, timeout=0.5)
    assert done == 6
    assert h.sweep("sw1-000000a0")["state"] == "completed"
    with h.db.transaction() as conn:
        rows = conn.execute("SELECT trial_name, state, metrics, attempts FROM trial_results ORDER BY trial_name").fetchall()
    assert [r["state"] for r in rows] == ["completed"] * 6
    assert rows[5]["metrics"] == {"val_loss": 1.0 / 6}


def test_crash_is_retried_as_a_new_attempt_then_marked_failed(h: Any, delivery: Any) -> None:
    submit(h, delivery, {**SPEC, "max_concurrent": 1})
    first = h.published(1)[0]
    finish(h, delivery, first, "failed", exit_code=1, error="Traceback...\nValueError: boom")
    retry = h.published(1)[0]
    assert (retry.trial_id, retry.attempt) == (first.trial_id, 2)
    finish(h, delivery, first, "completed")  # a late event of attempt 1 is fenced off
    assert h.states("sw1-000000a0")[first.trial_id] == "queued"
    finish(h, delivery, retry, "failed", exit_code=1, error="ValueError: boom again")
    row = h.trial(first.trial_id)
    assert (row["state"], row["error"], row["attempts"]) == ("failed", "ValueError: boom again", 2)
    assert h.published(1)[0].index == 1  # the sweep goes on


def test_undecodable_messages_are_dead_lettered_and_the_planner_goes_on(h: Any, delivery: Any) -> None:
    d = delivery(b"\xff not json", {"sweep_id": "junk-000000a4"})
    run_handler(lambda x: handle_sweep_message(x, h.deps), d)
    assert d.settled == "dead-letter"
    assert h.sweep("junk-000000a4")["state"] == "rejected"
    e = delivery(b'{"kind": "trial.finished"}')
    run_handler(lambda x: handle_event(x, h.deps), e)
    assert e.settled == "dead-letter"
    with pytest.raises(DecodeError):
        handle_event(delivery(b"[]"), h.deps)
    ok = submit(h, delivery)  # and the next good message works
    assert ok.settled == "ack" and len(h.published(2)) == 2


class FlakyBroker(MemoryBroker):
    """A broker that refuses publishes: the planner crashing between its
    commit and the broker's confirm looks like this from the database."""

    def publish_many(self, messages: Any) -> None:
        raise RetryableError("broker gone")


@ON_PG  # the outbox's recovery itself: publish_pending reads PostgreSQL
def test_trials_written_but_not_published_are_published_by_the_next_planner(h: Any, delivery: Any) -> None:
    crashed = h.planner(broker=FlakyBroker())
    d = delivery(json.dumps(SPEC).encode(), {"sweep_id": "sw2-000000a1"})
    with pytest.raises(RetryableError):
        handle_sweep_message(d, crashed)
    assert d.settled is None  # not acked: the broker would redeliver it
    assert set(h.states("sw2-000000a1").values()) == {"pending"}
    assert publish_pending(h.deps) == 2  # a restarted planner's recovery step
    assert sorted(m.index for m in h.published(2)) == [0, 1]
    assert set(h.states("sw2-000000a1").values()) == {"queued"}
    submit(h, delivery, SPEC, "sw2-000000a1")  # the redelivered submission adds nothing
    assert h.published() == []


def test_retry_policy_requeues_when_the_database_stays_down(delivery: Any) -> None:
    calls = []

    def down(d: Any) -> None:
        calls.append(1)
        raise RetryableError("db down")

    d = delivery(b"{}")
    run_handler(down, d, Backoff(base=0.001, cap=0.001, attempts=3))
    assert (len(calls), d.settled) == (3, "requeue")


def test_final_metrics_are_the_last_value_of_each_name_over_attempts(h: Any, delivery: Any) -> None:
    submit(h, delivery, {**SPEC, "max_concurrent": 1})
    first = h.published(1)[0]
    finish(h, delivery, first, "preempted", metrics={"val_loss": 0.9, "params_m": 1.5})
    second = h.published(1)[0]
    assert second.attempt == 2
    finish(h, delivery, second, "completed", metrics={"val_loss": 0.4})
    row = h.trial(first.trial_id)
    assert row["metrics"] == {"val_loss": 0.4, "params_m": 1.5}
    assert (row["attempts"], row["preemptions"]) == (2, 1)


def test_a_preempted_trial_resumes_ahead_of_its_sweeps_new_trials(h: Any, delivery: Any) -> None:
    """Its next attempt is published one priority level above the sweep's fresh trials (capped at 9)."""
    submit(h, delivery, {**SPEC, "max_concurrent": 1, "priority": 3})
    first = h.published(1)[0]
    assert h.priorities[f"{first.trial_id}#1"] == 3
    h.start(first)
    finish(h, delivery, first, "preempted")
    second = h.published(1)[0]
    assert (second.trial_id, second.attempt, h.priorities[f"{second.trial_id}#2"]) == (first.trial_id, 2, 4)
    from spotsweep.services.planner.outbox import publish_priority

    assert [publish_priority(p, a) for p, a in ((0, 1), (0, 2), (8, 5), (9, 2))] == [0, 1, 9, 9]


def test_a_diverged_final_metric_is_stored_not_dead_lettered(h: Any, delivery: Any) -> None:
    import math

    submit(h, delivery, {**SPEC, "max_concurrent": 1})
    msg = h.published(1)[0]
    d = finish(h, delivery, msg, "completed", metrics={"val_loss": math.nan, "loss": math.inf})
    assert d.settled == "ack"
    row = h.trial(msg.trial_id)
    assert row["state"] == "completed" and row["metrics"] == {"val_loss": "NaN", "loss": "Infinity"}
    assert h.published(1)[0].index == 1  # and the sweep goes on


def test_an_agent_that_missed_the_cancel_is_told_again(h: Any, delivery: Any) -> None:
    told: queue.Queue[bytes] = queue.Queue()
    q = h.broker.declare_private_queue([(topology.CONTROL_EXCHANGE, "")])
    h.broker.consume(q, lambda d: (told.put(d.body), d.ack()), prefetch=10)
    submit(h, delivery)
    msg = h.published(2)[0]
    handle_sweep_message(delivery(b"{}", {"kind": "cancel", "sweep_id": "sw1-000000a0"}), h.deps)
    assert decode(told.get(timeout=2)).kind == "sweep.cancel"  # type: ignore[attr-defined]
    late = TrialStarted(sweep_id="sw1-000000a0", trial_id=msg.trial_id, attempt=1, agent="late-agent")
    handle_event(delivery(encode(late)), h.deps)
    assert decode(told.get(timeout=2)).sweep_id == "sw1-000000a0"
    assert h.states("sw1-000000a0")[msg.trial_id] == "cancelled"


@ON_PG
def test_a_failed_publish_is_retried_by_the_events_redelivery(h: Any, delivery: Any) -> None:
    submit(h, delivery, {**SPEC, "max_concurrent": 1})
    first = h.published(1)[0]
    ev = TrialFinished(sweep_id="sw1-000000a0", trial_id=first.trial_id, attempt=1, outcome="failed", error="x")
    flaky = h.planner(broker=FlakyBroker())
    d = delivery(encode(ev))
    with pytest.raises(RetryableError):
        handle_event(d, flaky)  # decision committed, publish failed, not acked
    assert h.states("sw1-000000a0")[first.trial_id] == "pending"
    handle_event(delivery(encode(ev), redelivered=True), h.deps)  # the redelivery
    retry = h.published(1)[0]
    assert (retry.trial_id, retry.attempt) == (first.trial_id, 2)


def test_a_batch_of_events_of_two_sweeps_is_decided_in_order(h: Any, delivery: Any) -> None:
    """The planner consumes events in batches: a trial's start and end may arrive together."""
    from spotsweep.services.planner.handlers import handle_events

    submit(h, delivery, {**SPEC, "max_concurrent": 1}, "one-000000a5")
    submit(h, delivery, {**SPEC, "max_concurrent": 1}, "two-000000a6")
    msgs = h.published(2)
    batch = []
    for msg in msgs:
        batch.append(delivery(encode(TrialStarted(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, agent="a", run_id="r"))))
        batch.append(delivery(encode(TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, outcome="completed",
                                                   run_id="r", metrics={"val_loss": 0.5}))))
    handle_events(batch, h.deps)
    assert {h.states(s)[m.trial_id] for s, m in zip(("one-000000a5", "two-000000a6"), msgs)} == {"completed"}
    assert sorted((m.sweep_id, m.index) for m in h.published(2)) == [("one-000000a5", 1), ("two-000000a6", 1)]  # each launched its next


def test_an_event_of_a_kind_the_planner_does_not_decide_is_said_and_changes_nothing(h: Any, delivery: Any) -> None:
    """A kind routed to the planner by a hand-made binding is acked with a warning naming it, never dropped in silence."""
    from structlog.testing import capture_logs

    from spotsweep.services.planner.handlers import handle_events
    from spotsweep.shared.messages import TrialStaging

    submit(h, delivery, {**SPEC, "max_concurrent": 1}, "odd-000000a7")
    msg = h.published(1)[0]
    with capture_logs() as logs:
        handle_events([delivery(encode(TrialStaging(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1,
                                                    agent="a")))], h.deps)
    assert [e["kind"] for e in logs if "does not decide" in e["event"]] == ["trial.staging"]
    assert h.states("odd-000000a7")[msg.trial_id] == "queued"
