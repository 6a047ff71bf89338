"""Trials an agent took from RabbitMQ but never started go back unmarked when it
stops taking trials (a drain, a node found broken), so the next agent does
not count them as lost. Real RabbitMQ: the mark is the broker's own
``redelivered`` flag, which is what makes an agent count a loss."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from waiting import take, wait_until
from spotsweep.services.agent.handlers import Agent, Connection, Slots
from spotsweep.services.agent.health import Health
from spotsweep.services.agent.main import connect, consume_trials
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.messages import TrialFinished, TrialMessage, TrialStarted, decode, encode, unpack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NO_GPU = "raise SystemExit('no CUDA-capable device is detected')"
FOREVER = "import time\nwhile True: time.sleep(0.05)"


def connected(url: str) -> RabbitBroker:
    broker = RabbitBroker(url)
    threading.Thread(target=broker.run, daemon=True).start()  # the I/O loop, as serve() runs it
    return broker


class Node:
    """One agent's connection to RabbitMQ, and an observer's connection that sees every event it publishes."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.broker = connected(url)
        self.broker.declare(topology.service_queues(("cpu",)))
        self.observer = connected(url)
        self.events: queue.Queue[Any] = queue.Queue()
        every_event = self.observer.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
        self.observer.consume(every_event, lambda d: ([self.events.put(e) for e in unpack(decode(d.body))], d.ack()), prefetch=100)
        self.store = LocalArtifactStore(tmp / "artifacts")

    def submit(self, *trials: TrialMessage) -> None:
        for t in trials:
            self.broker.publish(Outgoing(topology.TRIALS_EXCHANGE, "cpu", encode(t), message_id=f"{t.trial_id}#1"))

    def seen(self, kind: type, n: int, timeout: float = 30.0) -> list[Any]:
        return take(self.events, kind, n, timeout)

    def waiting(self) -> list[tuple[str, bool]]:
        """(trial id, redelivered) of each trial left on the queue, taken off it."""
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        out = []
        try:
            ch = conn.channel()
            while True:
                method, _, body = ch.basic_get(topology.trials_queue("cpu"), auto_ack=True)
                if method is None:
                    return sorted(out)
                out.append((decode(body).trial_id, bool(method.redelivered)))
        finally:
            conn.close()


def trial(sweep: str, index: int, script: str) -> TrialMessage:
    return TrialMessage(sweep_id=sweep, trial_id=f"{sweep}.{index}", attempt=1, trial_name=f"t{index}", index=index,
                        params={}, argv=["python", "-c", script], metric="loss", resource_class="cpu")


@pytest.fixture()
def node(rabbit_url: str, tmp_path: Path) -> Iterator[Node]:
    n = Node(rabbit_url, tmp_path)
    yield n
    n.broker.stop(drain=False)
    n.observer.stop(drain=False)


def test_a_node_found_broken_leaves_the_trials_behind_unmarked(node: Node, tmp_path: Path) -> None:
    deps = connect(node.broker, Agent(store=node.store, config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work"),
                                      slots=Slots(1, None), health=Health(limit=2, observe=lambda: "GPU 0 is lost")), "cpu")
    node.submit(trial("a", 0, NO_GPU), trial("b", 1, NO_GPU), *(trial("c", i, "print(1)") for i in (2, 3, 4)))
    assert len(node.seen(TrialFinished, n=2)) == 2
    assert wait_until(lambda: deps.agent.health.tripped, timeout=30)
    node.broker.stop(drain=True)  # everything this connection held is settled by now
    assert node.waiting() == [("c.2", False), ("c.3", False), ("c.4", False)]  # none looks lost to the next agent


def test_a_draining_agent_hands_back_trials_it_had_prefetched_but_not_started(node: Node, tmp_path: Path) -> None:
    deps = Connection(node.broker, Agent(store=node.store, slots=Slots(1, None),
                                         config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work")))
    # More prefetched than running: two trials wait in the consumer's buffer
    # behind the running one, as they do for a moment when a slot frees up.
    consumer = consume_trials(node.broker, deps, "cpu", prefetch=3, concurrency=1)
    node.submit(trial("sw", 0, FOREVER), trial("sw", 1, "print(1)"), trial("sw", 2, "print(1)"))
    assert [e.trial_id for e in node.seen(TrialStarted, n=1)] == ["sw.0"]
    assert wait_until(lambda: len(consumer.buffer) == 2, timeout=30)  # type: ignore[attr-defined]
    deps.agent.preempt.set()  # what the agent's drain does on SIGTERM...
    node.broker.stop(drain=True)  # ...then serve() stops the connection, draining
    assert [(e.trial_id, e.outcome) for e in node.seen(TrialFinished, n=1)] == [("sw.0", "preempted")]
    assert node.waiting() == [("sw.1", False), ("sw.2", False)]
