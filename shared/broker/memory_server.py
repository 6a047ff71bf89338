"""The in-process broker's server side: exchanges, bindings, queues, and routing.

One :class:`MemoryServer` is the state every :class:`~.memory.MemoryBroker`
connection to it shares, all of it guarded by ``MemoryServer.lock``. Methods
named ``*_locked`` expect the caller to hold that lock. Routing follows
RabbitMQ: direct, fanout and topic exchanges, the default exchange by queue
name, priorities capped at the queue's ``x-max-priority``, and dead-lettering
of rejected messages with an ``x-death`` header.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spotsweep.shared.errors import PermanentError
from spotsweep.shared.topology import DEAD_LETTER_EXCHANGE, QueueSpec

if TYPE_CHECKING:  # memory imports this module; queues only hold its objects
    from spotsweep.shared.broker.memory import MemoryBroker, _MemoryConsumer


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: ``*`` is exactly one word, ``#`` zero or more."""
    p, k = pattern.split("."), key.split(".")

    def match(i: int, j: int) -> bool:
        if i == len(p):
            return j == len(k)
        if p[i] == "#":
            return any(match(i + 1, jj) for jj in range(j, len(k) + 1))
        return j < len(k) and p[i] in ("*", k[j]) and match(i + 1, j + 1)

    return match(0, 0)


@dataclass
class _Message:
    exchange: str
    routing_key: str
    body: bytes
    headers: dict[str, Any]
    message_id: str | None
    priority: int
    user_id: str | None = None  # the sending connection's user (validated at publish, as RabbitMQ does)
    seq: int = 0  # arrival order; a requeued message keeps it, so it goes back near the head
    redelivered: bool = False


@dataclass
class _Queue:
    spec: QueueSpec
    owner: MemoryBroker | None  # exclusive queues die with their connection
    heap: list[tuple[int, int, _Message]] = field(default_factory=list)
    consumers: list[_MemoryConsumer] = field(default_factory=list)
    next_consumer: int = 0

    def push(self, msg: _Message) -> None:
        top = self.spec.max_priority
        prio = min(max(msg.priority, 0), top) if top else 0  # like RabbitMQ: capped, ignored without x-max-priority
        heapq.heappush(self.heap, (-prio, msg.seq, msg))


class MemoryServer:
    """The broker's state (exchanges, bindings, queues), shared by connections."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exchanges: dict[str, str] = {}
        self.bindings: dict[str, list[tuple[str, str]]] = {}  # exchange -> [(key pattern, queue)]
        self.queues: dict[str, _Queue] = {}
        self._seq = itertools.count()

    def route_locked(self, msg: _Message) -> None:
        """Copy ``msg`` into every queue it routes to; drop it if none (like RabbitMQ)."""
        if msg.exchange == "":
            targets = [msg.routing_key] if msg.routing_key in self.queues else []
        else:
            kind = self.exchanges.get(msg.exchange)
            if kind is None:
                raise PermanentError(f"exchange {msg.exchange!r} does not exist; declare the topology first")
            targets = [
                q
                for pattern, q in self.bindings.get(msg.exchange, [])
                if kind == "fanout"
                or (kind == "direct" and pattern == msg.routing_key)
                or (kind == "topic" and topic_matches(pattern, msg.routing_key))
            ]
        for name in dict.fromkeys(targets):  # a queue bound twice still gets one copy
            queue = self.queues[name]
            queue.push(replace(msg, headers=dict(msg.headers), seq=next(self._seq)))
            self.dispatch_locked(queue)

    def dispatch_locked(self, queue: _Queue) -> None:
        """Push queued messages round-robin to consumers with prefetch room."""
        while queue.heap and queue.consumers:
            n = len(queue.consumers)
            for i in range(n):
                consumer = queue.consumers[(queue.next_consumer + i) % n]
                if consumer.has_room_locked():
                    queue.next_consumer = (queue.next_consumer + i + 1) % n
                    consumer.push_locked(heapq.heappop(queue.heap)[2])
                    break
            else:
                return  # every consumer is full

    def requeue_locked(self, queue_name: str, msg: _Message) -> None:
        queue = self.queues.get(queue_name)
        if queue is None:
            return  # its (exclusive) queue is gone, as in RabbitMQ
        msg.redelivered = True
        queue.push(msg)
        self.dispatch_locked(queue)

    def dead_letter_locked(self, queue_name: str, msg: _Message) -> None:
        queue = self.queues.get(queue_name)
        if queue is None or not queue.spec.dead_letter or DEAD_LETTER_EXCHANGE not in self.exchanges:
            return
        death = {"queue": queue_name, "reason": "rejected", "exchange": msg.exchange, "routing-keys": [msg.routing_key]}
        headers = {**msg.headers, "x-death": [death, *msg.headers.get("x-death", [])]}
        self.route_locked(replace(msg, exchange=DEAD_LETTER_EXCHANGE, headers=headers, redelivered=False))

