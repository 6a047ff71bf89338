"""The in-process broker: RabbitMQ's semantics, as far as spotsweep uses them.

Local mode runs planner, collector and agents in one process over one
:class:`MemoryServer`; tests use it as the fast twin of the RabbitMQ adapter
(the same contract tests run against both). A :class:`MemoryBroker` plays one
*connection*: its consumers and exclusive queues end with it, and its unacked
deliveries go back to their queues when it closes. Services may share one
connection, or take their own with :meth:`MemoryBroker.new_connection`.

Everything shared sits behind one lock; each consumer has a condition on that
lock, so workers sleep until a delivery is pushed to them (no polling).
Messages are pushed to a consumer's buffer as RabbitMQ pushes them over the
wire: while the consumer holds fewer than ``prefetch`` unacked deliveries.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from spotsweep.shared import log
from spotsweep.shared.broker.port import DRAIN_GRACE_S, Broker, Consumer, Delivery, Handler, Outgoing, invoke
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.topology import DEAD_LETTER_EXCHANGE, EXCHANGES, QueueSpec

_log = log.get(__name__)


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


class MemoryDelivery(Delivery):
    def __init__(self, consumer: _MemoryConsumer, msg: _Message) -> None:
        self._consumer = consumer
        self._msg = msg
        self.body = msg.body
        self.headers = dict(msg.headers)
        self.routing_key = msg.routing_key
        self.redelivered = msg.redelivered
        self.message_id = msg.message_id

    def ack(self) -> None:
        self._consumer.settle(self, "ack")

    def nack(self, requeue: bool = True) -> None:
        self._consumer.settle(self, "requeue" if requeue else "reject")


class _MemoryConsumer(Consumer):
    def __init__(self, conn: MemoryBroker, queue: str, handler: Handler, prefetch: int, concurrency: int) -> None:
        self._conn = conn
        self._server = conn.server
        self.queue = queue
        self._handler = handler
        self._prefetch = prefetch
        self._wakeup = threading.Condition(self._server.lock)
        self.buffer: deque[MemoryDelivery] = deque()
        self.unacked: set[MemoryDelivery] = set()
        self.running = 0
        self.cancelled = False
        self.threads = [
            threading.Thread(target=self._work, name=f"memory-consumer-{queue}-{i}", daemon=True)
            for i in range(max(1, concurrency))
        ]

    def has_room_locked(self) -> bool:
        return not self.cancelled and (self._prefetch <= 0 or len(self.unacked) < self._prefetch)

    def push_locked(self, msg: _Message) -> None:
        delivery = MemoryDelivery(self, msg)
        self.unacked.add(delivery)
        self.buffer.append(delivery)
        self._wakeup.notify()

    def _work(self) -> None:
        while True:
            with self._server.lock:
                while not self.buffer and not self.cancelled:
                    self._wakeup.wait()
                if not self.buffer:
                    return
                delivery = self.buffer.popleft()
                self.running += 1
            try:
                invoke(self._handler, delivery)
            finally:
                with self._server.lock:
                    self.running -= 1
                    self._conn.idle.notify_all()

    def settle(self, delivery: MemoryDelivery, how: str) -> None:
        with self._server.lock:
            if delivery not in self.unacked:
                _log.warning("delivery_already_settled", queue=self.queue, message_id=delivery.message_id, op=how)
                return
            self.unacked.discard(delivery)
            if how == "requeue":
                self._server.requeue_locked(self.queue, delivery._msg)
            elif how == "reject":
                self._server.dead_letter_locked(self.queue, delivery._msg)
            queue = self._server.queues.get(self.queue)
            if queue is not None:
                self._server.dispatch_locked(queue)  # room for one more
            self._conn.idle.notify_all()

    def cancel(self) -> None:
        with self._server.lock:
            self.cancel_locked()

    def cancel_locked(self) -> None:
        """No new deliveries; pushed-but-unstarted ones go back; running ones stay unacked."""
        if self.cancelled:
            return
        self.cancelled = True
        queue = self._server.queues.get(self.queue)
        if queue is not None and self in queue.consumers:
            queue.consumers.remove(self)
        while self.buffer:
            delivery = self.buffer.popleft()
            self.unacked.discard(delivery)
            self._server.requeue_locked(self.queue, delivery._msg)
        self._wakeup.notify_all()

    def release_locked(self) -> None:
        """The connection closes: every unacked delivery goes back to its queue."""
        self.cancel_locked()
        for delivery in sorted(self.unacked, key=lambda d: d._msg.seq):
            self._server.requeue_locked(self.queue, delivery._msg)
        self.unacked.clear()


class MemoryBroker(Broker):
    """One connection to an in-process :class:`MemoryServer` (a fresh one by default)."""

    def __init__(self, server: MemoryServer | None = None) -> None:
        self.server = server or MemoryServer()
        self.idle = threading.Condition(self.server.lock)  # signalled when a handler ends or a delivery settles
        self._consumers: list[_MemoryConsumer] = []
        self._closing = False
        self._closed = threading.Event()

    def new_connection(self) -> MemoryBroker:
        """Another connection to the same server (its own consumers and lifetime)."""
        return MemoryBroker(self.server)

    def declare(self, queues: Iterable[QueueSpec]) -> None:
        with self.server.lock:
            self._check_open_locked(closing_ok=True)
            for ex in EXCHANGES:
                self.server.exchanges.setdefault(ex.name, ex.type)
            for spec in queues:
                self._declare_queue_locked(spec)

    def _declare_queue_locked(self, spec: QueueSpec) -> None:
        existing = self.server.queues.get(spec.name)
        if existing is None:
            self.server.queues[spec.name] = _Queue(spec, self if spec.exclusive else None)
        elif (existing.spec.max_priority, existing.spec.dead_letter) != (spec.max_priority, spec.dead_letter):
            raise PermanentError(f"queue {spec.name!r} exists with different arguments")  # RabbitMQ: 406
        for exchange, key in spec.bindings:
            if exchange == "":
                continue  # the default exchange binds every queue by name
            if exchange not in self.server.exchanges:
                raise PermanentError(f"exchange {exchange!r} does not exist")
            binding = (key, spec.name)
            if binding not in self.server.bindings.setdefault(exchange, []):
                self.server.bindings[exchange].append(binding)

    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        name = f"amq.gen-{uuid.uuid4().hex}"
        with self.server.lock:
            self._check_open_locked()
            self._declare_queue_locked(QueueSpec(name, tuple(bindings), dead_letter=False, exclusive=True))
        return name

    def publish(self, message: Outgoing) -> None:
        msg = _Message(
            message.exchange,
            message.routing_key,
            message.body,
            dict(message.headers),
            message.message_id,
            message.priority,
        )
        with self.server.lock:
            self._check_open_locked(closing_ok=True)  # a draining handler still publishes its results
            self.server.route_locked(msg)

    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1) -> Consumer:
        with self.server.lock:
            self._check_open_locked()
            q = self.server.queues.get(queue)
            if q is None:
                raise PermanentError(f"queue {queue!r} does not exist; declare it first")
            consumer = _MemoryConsumer(self, queue, handler, prefetch, concurrency)
            self._consumers.append(consumer)
            q.consumers.append(consumer)
            for t in consumer.threads:
                t.start()
            self.server.dispatch_locked(q)
        return consumer

    def run(self) -> None:
        """Nothing to serve in-process: block until the connection is closed."""
        self._closed.wait()

    def stop(self, drain: bool = True) -> None:
        with self.server.lock:
            if self._closing:
                return
            self._closing = True
            for c in self._consumers:
                c.cancel_locked()
        on_worker = any(threading.current_thread() in c.threads for c in self._consumers)
        if drain and on_worker:
            # A handler stopping its own connection cannot wait for itself.
            threading.Thread(target=self._drain_and_close, name="memory-broker-stop", daemon=True).start()
        elif drain:
            self._drain_and_close()
        else:
            self._close()

    def _drain_and_close(self) -> None:
        with self.server.lock:
            self.idle.wait_for(lambda: all(c.running == 0 for c in self._consumers))
            self.idle.wait_for(lambda: all(not c.unacked for c in self._consumers), timeout=DRAIN_GRACE_S)
        self._close()

    def _close(self) -> None:
        with self.server.lock:
            for c in self._consumers:
                c.release_locked()
            for name in [n for n, q in self.server.queues.items() if q.owner is self]:
                del self.server.queues[name]
                for bindings in self.server.bindings.values():
                    bindings[:] = [b for b in bindings if b[1] != name]
        self._closed.set()

    def _check_open_locked(self, closing_ok: bool = False) -> None:
        if self._closed.is_set() or (self._closing and not closing_ok):
            raise RetryableError("memory broker connection is closed")
