"""An agent says what it offers when it connects and again each period, until its connection is gone."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from spotsweep.services.agent import announce
from spotsweep.services.agent.capacity import Capacity, Ledger
from spotsweep.services.agent.state import Agent, Slots
from spotsweep.services.agent.supervise import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.broker.port import Delivery
from spotsweep.shared.messages import AgentSeen, decode


def test_the_announcement_says_what_the_agent_offers_and_stops_with_its_connection(tmp_path: Path) -> None:
    broker = MemoryBroker()
    broker.declare(topology.service_queues(("cpu",)))
    got: queue.Queue[AgentSeen] = queue.Queue()

    def collect(delivery: Delivery) -> None:
        got.put(decode(delivery.body))  # type: ignore[arg-type]
        delivery.ack()

    broker.consume(topology.COLLECTOR_QUEUE, collect, prefetch=10)
    agent = Agent(store=LocalArtifactStore(tmp_path / "a"), config=RunnerConfig(agent_id="n1-42", workdir=tmp_path / "w"),
                  slots=Slots(2, ["0,1", "2,3"]), ledger=Ledger(Capacity(cpus=6, memory=2**33, resource_class="cpu")))
    lost = threading.Event()
    thread = announce.start(broker, agent, "cpu", lost, every=0.05)
    first, second = got.get(timeout=10), got.get(timeout=10)
    assert (first.agent, first.resource_class, first.slots, first.cpus, first.memory, first.gpus) == (
        "n1-42", "cpu", 2, 6.0, 2**33, 2)
    assert second.message_id != first.message_id  # again each period
    lost.set()
    thread.join(10)
    assert not thread.is_alive()
