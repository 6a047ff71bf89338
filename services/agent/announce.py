"""An agent says what it offers its trials: when it connects, then every :data:`EVERY_S` seconds.

The announcement (:class:`~spotsweep.shared.messages.AgentSeen`: class, slots,
cores, memory, GPUs per slot) goes to the events exchange as
``agent.seen.<class>``; the collector keeps each agent's newest in the table
``agents``. ``submit`` and ``status`` read it to name a request no agent of
the class seen recently can ever hold (``spotsweep/commands/idle_classes.py``), instead
of its trials waiting in silence or failing one agent at a time. It is sent
without waiting for a confirm: a lost one is replaced a minute later.
"""

from __future__ import annotations

import threading

from spotsweep.services.agent.state import Agent
from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker, Outgoing
from spotsweep.shared.messages import AgentSeen, encode

_log = log.get("spotsweep.agent")
EVERY_S = 60.0  # readers judge agents seen within a few of these (idle_classes.RECENT_S)


def seen(agent: Agent) -> AgentSeen:
    """The agent's announcement now."""
    capacity = agent.ledger.capacity
    return AgentSeen(agent=agent.config.agent_id, resource_class=capacity.resource_class, slots=agent.slots.count,
                     cpus=capacity.cpus, memory=capacity.memory, gpus=agent.slots.gpus)


def start(broker: Broker, agent: Agent, resource_class: str, lost: threading.Event,
          every: float = EVERY_S) -> threading.Thread:
    """Announce on ``broker`` now and every ``every`` seconds until ``lost`` is set or an announcement
    failed (the connection is gone: the next connection starts its own)."""

    def loop() -> None:
        while True:
            message = seen(agent)
            sent = broker.publish_async([Outgoing(topology.EVENTS_EXCHANGE, topology.agent_seen_routing_key(resource_class),
                                                  encode(message), message_id=message.message_id)])
            if lost.wait(every):
                return
            if sent.done() and (error := sent.exception()) is not None:
                _log.debug("announcements stop: the connection is gone", error=str(error))
                return

    thread = threading.Thread(target=loop, name="agent-announce", daemon=True)
    thread.start()
    return thread
