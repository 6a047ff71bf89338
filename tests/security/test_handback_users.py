"""A trial handed back under users per role costs no lost delivery (issue 19 sections 2, 3).

With one broker user per role an agent may not publish to ``spotsweep.trials``,
so a draining agent requeues the trials it will not start (the planner's
``user_id`` intact) after marking each requeue a hand-back in the artifact
store; the next agent subtracts the marks from its loss count
(services/agent/handback.py). Over the real RabbitMQ with the users of
deploy/rabbitmq/definitions.json (``users`` in conftest.py): the handed-back
trials run once each on the next agent, with no loss counted and none left
on the queue. Then the accounting, through the agent's handler: a real loss
still counts wherever it falls among hand-backs, and ``retries.max_lost``
still ends a trial that keeps killing its agents.
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent.attempts import Attempts
from spotsweep.services.agent.handback import handback_prefix, unpaired_losses
from spotsweep.services.agent.handlers import Agent as AgentState, Connection, Slots, handle_trial
from spotsweep.services.agent.main import connect, consume_trials
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.checkpoint_layout import loss_prefix
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.broker.port import Broker, Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.messages import TrialFinished, TrialMessage, TrialStarted, decode, encode, unpack
from waiting import take, wait_until

FOREVER = "import time\nwhile True: time.sleep(0.05)"


def running(url: str, opened: list[Broker]) -> RabbitBroker:
    broker = RabbitBroker(url)
    threading.Thread(target=broker.run, daemon=True).start()
    opened.append(broker)
    return broker


def trial(index: int, script: str = "print(1)", max_lost: int = 10) -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id=f"sw.{index}", attempt=1, trial_name=f"t{index}", index=index, params={},
                        argv=["python", "-c", script], metric="loss", max_lost=max_lost, resource_class="cpu")


def agent_state(store: LocalArtifactStore, work: Path, name: str) -> AgentState:
    return AgentState(store=store, slots=Slots(1, None), config=RunnerConfig(agent_id=name, workdir=work / name))


@pytest.mark.needs_rabbit
@pytest.mark.timeout(120)
def test_trials_a_draining_agent_hands_back_run_once_elsewhere_with_no_loss(users: dict[str, str], opened: list[Broker],
                                                                            tmp_path: Path) -> None:
    names = json.loads(users["_names"])
    planner = running(users["planner"], opened)
    planner.declare(topology.service_queues(("cpu",)))
    admin = running(users["admin"], opened)  # sees every event
    events: queue.Queue[Any] = queue.Queue()
    every_event = admin.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
    admin.consume(every_event, lambda d: ([events.put(e) for e in unpack(decode(d.body))], d.ack()), prefetch=100)
    store = LocalArtifactStore(tmp_path / "artifacts")  # the bucket every agent shares
    accept = {names["planner"]}

    first = running(users["agent"], opened)
    a = connect(first, agent_state(store, tmp_path, "a"), "cpu", accept_users=accept, own_user=names["agent"])
    assert not a.republish  # its user is not the planner's: it may not publish trials
    assert a.trials_consumer is not None
    a.trials_consumer.cancel()
    # More prefetched than running: two trials wait in the consumer's buffer behind
    # the running one, as they do for a moment when a slot frees up.
    consumer = consume_trials(first, a, "cpu", prefetch=3, concurrency=1, accept_users=accept)
    for t in (trial(0, FOREVER), trial(1), trial(2)):
        planner.publish(Outgoing(topology.TRIALS_EXCHANGE, "cpu", encode(t), message_id=f"{t.trial_id}#1"))
    assert [e.trial_id for e in take(events, TrialStarted, 1, 30)] == ["sw.0"]
    assert wait_until(lambda: len(consumer.buffer) == 2, timeout=30)  # type: ignore[attr-defined]
    a.agent.preempt.set()  # the agent's drain on SIGTERM...
    first.stop(drain=True)  # ...then its connection stops, draining: sw.1 and sw.2 go back
    for t in ("sw.1", "sw.2"):
        assert len(store.list(handback_prefix("sw", t, 1))) == 1

    second = running(users["agent"], opened)
    connect(second, agent_state(store, tmp_path, "b"), "cpu", accept_users=accept, own_user=names["agent"])
    seen = _until(events, lambda got: sum(isinstance(e, TrialFinished) for e in got) == 3, timeout=60)
    assert {e.trial_id: e.outcome for e in seen if isinstance(e, TrialFinished)} == {
        "sw.0": "preempted", "sw.1": "completed", "sw.2": "completed"}, seen
    starts = sorted((e.trial_id, e.agent, e.redelivered, e.losses) for e in seen if isinstance(e, TrialStarted))
    assert starts == [("sw.1", "b", True, 0), ("sw.2", "b", True, 0)]  # once each; redelivered, yet no loss
    assert [len(store.list(loss_prefix("sw", t, 1))) for t in ("sw.1", "sw.2")] == [1, 1]  # paired with the marks
    second.stop(drain=True)
    assert _queued(users["admin"]) == 0  # no copy left to run twice


def _until(events: queue.Queue[Any], done: Any, timeout: float) -> list[Any]:
    """Every event from ``events`` until ``done(those so far)`` or ``timeout``."""
    got: list[Any] = []
    wait_until(lambda: bool(_drain(events, got)) and done(got), timeout=timeout)
    return got


def _drain(events: queue.Queue[Any], into: list[Any]) -> bool:
    while True:
        try:
            into.append(events.get_nowait())
        except queue.Empty:
            return True


def _queued(url: str) -> int:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_declare(topology.trials_queue("cpu"), passive=True).method.message_count)
    finally:
        conn.close()


class Node:
    """An agent's handler over an in-memory broker whose agents may not republish (users per role)."""

    def __init__(self, tmp: Path) -> None:
        self.broker = MemoryBroker(user="agent")
        self.broker.declare(topology.service_queues(("cpu",)))
        self.events: list[Any] = []
        q = self.broker.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
        self.broker.consume(q, lambda d: (self.events.extend(unpack(decode(d.body))), d.ack()), prefetch=100)
        self.store = LocalArtifactStore(tmp / "artifacts")
        self.conn = Connection(self.broker, agent_state(self.store, tmp, "a1"), republish=False)

    def hand_back(self, delivery: Any, msg: TrialMessage, redelivered: bool) -> None:
        self.conn.agent.preempt.set()
        d = delivery(encode(msg), redelivered=redelivered)
        handle_trial(d, self.conn)
        self.conn.agent.preempt.clear()
        assert d.settled == "requeue"  # back on its queue, the planner's message as it was

    def run(self, delivery: Any, msg: TrialMessage) -> tuple[str | None, int]:
        """A redelivered delivery handled to its end: how it was settled, and the losses its start
        reported (-1: it never started)."""
        before = len(self.events)
        # Each run stands for another agent's (this one's may have died): none of them ran the attempt.
        self.conn.agent.attempts = Attempts()
        d = delivery(encode(msg), redelivered=True)
        handle_trial(d, self.conn)
        assert wait_until(lambda: any(isinstance(e, TrialFinished) for e in self.events[before:]), timeout=30)
        started = [e for e in self.events[before:] if isinstance(e, TrialStarted)]
        return d.settled, started[0].losses if started else -1


@pytest.fixture()
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_a_hand_back_passed_on_by_a_second_draining_agent_is_still_no_loss(node: Node, delivery: Any) -> None:
    node.hand_back(delivery, trial(0), redelivered=False)
    node.hand_back(delivery, trial(0), redelivered=True)  # another draining agent got it next
    assert len(node.store.list(handback_prefix("sw", "sw.0", 1))) == 1
    assert node.run(delivery, trial(0)) == ("ack", 0)


def test_a_real_loss_counts_before_or_after_a_hand_back(node: Node, delivery: Any) -> None:
    node.hand_back(delivery, trial(1), redelivered=False)
    assert node.run(delivery, trial(1)) == ("ack", 0)  # the hand-back
    assert node.run(delivery, trial(1)) == ("ack", 1)  # as if that run's agent had died: one loss
    node.hand_back(delivery, trial(2), redelivered=True)  # a loss, then a draining agent passes it on
    assert node.run(delivery, trial(2)) == ("ack", 1)


def test_hand_backs_never_excuse_an_attempt_that_keeps_killing_its_agents(node: Node, delivery: Any) -> None:
    msg = trial(3, max_lost=1)
    node.hand_back(delivery, msg, redelivered=False)
    assert node.run(delivery, msg) == ("ack", 0)  # the hand-back's redelivery
    assert node.run(delivery, msg) == ("ack", 1)  # its agent died
    node.hand_back(delivery, msg, redelivered=True)
    assert node.run(delivery, msg) == ("dead-letter", -1)  # died again: past max_lost, never started
    assert [e.failure for e in node.events if isinstance(e, TrialFinished) and e.outcome == "failed"] == ["lost"]


def test_marks_only_ever_pair_with_losses() -> None:
    assert [unpaired_losses(lost, back) for lost, back in ((0, 0), (1, 1), (2, 1), (1, 3))] == [0, 0, 1, 0]
