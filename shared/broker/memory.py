"""The in-process broker: RabbitMQ's semantics, as far as spotsweep uses them.

Local mode runs planner, collector and agents in one process over one
:class:`MemoryServer` (:mod:`.memory_server`); tests use it as the fast twin of
the RabbitMQ adapter (the same contract tests run against both). A
:class:`MemoryBroker` plays one *connection*: its consumers and exclusive
queues end with it, and its unacked deliveries go back to their queues when it
closes. As over the wire, a consumer is pushed messages while it holds fewer
than ``prefetch`` unacked, and a publish naming another ``user_id`` than the
connection's login is refused (406), so sender checks mean the same on both.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Iterable

from spotsweep.shared import log
from spotsweep.shared.broker.memory_server import MemoryServer, _Message, _Queue
from spotsweep.shared.broker.dispatch import Workers
from spotsweep.shared.broker.port import DRAIN_GRACE_S, SLOW_HANDLER_S, Broker, Consumer, Delivery, Handler, Outgoing
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.topology import EXCHANGES, QueueSpec

_log = log.get(__name__)


class MemoryDelivery(Delivery):
    def __init__(self, consumer: _MemoryConsumer, msg: _Message) -> None:
        self._consumer = consumer
        self._msg = msg
        self.body = msg.body
        self.headers = dict(msg.headers)
        self.routing_key = msg.routing_key
        self.redelivered = msg.redelivered
        self.message_id = msg.message_id
        self.priority = msg.priority
        self.user_id = msg.user_id
        self.queue = consumer.queue
        self.connection = consumer.conn

    def ack(self) -> None:
        self._consumer.settle(self, "ack")

    def nack(self, requeue: bool = True) -> None:
        self._consumer.settle(self, "requeue" if requeue else "reject")


class _MemoryConsumer(Consumer):
    def __init__(self, conn: MemoryBroker, queue: str, handler: Handler, prefetch: int, concurrency: int,
                 finish_buffered: bool = False, retry: Backoff | None = None,
                 accept_users: Collection[str] | None = None, slow_after: float | None = SLOW_HANDLER_S) -> None:
        self.conn = conn
        self._server = conn.server
        self.queue = queue
        self._prefetch = prefetch
        self.unacked: set[MemoryDelivery] = set()
        self.cancelled = False
        kw = {} if retry is None else {"retry": retry}
        self.workers = Workers(queue, handler, concurrency, finish_buffered=finish_buffered, on_idle=self._idle,
                               accept_users=accept_users, slow_after=slow_after, **kw)
        self.threads = self.workers.threads
        self.buffer = self.workers.buffer  # deliveries not started yet (the dispatcher's)

    def has_room_locked(self) -> bool:
        return not self.cancelled and (self._prefetch <= 0 or len(self.unacked) < self._prefetch)

    def push_locked(self, msg: _Message) -> None:
        delivery = MemoryDelivery(self, msg)
        self.unacked.add(delivery)
        self.workers.push(delivery)

    def _idle(self) -> None:
        with self._server.lock:
            self.conn.idle.notify_all()

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
            self.conn.idle.notify_all()

    def cancel(self) -> None:
        with self._server.lock:
            self.cancel_locked()

    def cancel_locked(self) -> None:
        """No new deliveries; pushed-but-unstarted ones go back (or, with
        ``finish_buffered``, to the workers); running ones stay unacked."""
        if self.cancelled:
            return
        self.cancelled = True
        queue = self._server.queues.get(self.queue)
        if queue is not None and self in queue.consumers:
            queue.consumers.remove(self)
        for delivery in self.workers.cancel():
            assert isinstance(delivery, MemoryDelivery)
            self.unacked.discard(delivery)
            self._server.requeue_locked(self.queue, delivery._msg)

    def release_locked(self) -> None:
        """The connection closes: every unacked delivery goes back to its queue."""
        self.cancel_locked()
        for delivery in sorted(self.unacked, key=lambda d: d._msg.seq):
            self._server.requeue_locked(self.queue, delivery._msg)
        self.unacked.clear()
        self.workers.release()


class MemoryBroker(Broker):
    """One connection to an in-process :class:`MemoryServer` (a fresh one by default),
    logged in as ``user`` (RabbitMQ's default user, as the default URL's)."""

    def __init__(self, server: MemoryServer | None = None, user: str = "guest") -> None:
        self.server = server or MemoryServer()
        self.user = user
        self.idle = threading.Condition(self.server.lock)  # signalled when a handler ends or a delivery settles
        self._consumers: list[_MemoryConsumer] = []
        self._closing = False
        self._closed = threading.Event()

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

    def consumers(self, queue: str) -> int | None:
        with self.server.lock:
            q = self.server.queues.get(queue)
            return None if q is None else len(q.consumers)

    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        name = f"amq.gen-{uuid.uuid4().hex}"
        with self.server.lock:
            self._check_open_locked()
            self._declare_queue_locked(QueueSpec(name, tuple(bindings), dead_letter=False, exclusive=True))
        return name

    def publish(self, message: Outgoing) -> None:
        if message.user_id is not None and message.user_id != self.user:  # RabbitMQ: 406 PRECONDITION_FAILED
            raise PermanentError(f"publish: 406 PRECONDITION_FAILED - user_id property set to {message.user_id!r} "
                                 f"but authenticated user was {self.user!r}")
        msg = _Message(message.exchange, message.routing_key, message.body, dict(message.headers), message.message_id,
                       message.priority, self.user)
        with self.server.lock:
            self._check_open_locked(closing_ok=True)  # a draining handler still publishes its results
            self.server.route_locked(msg)

    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1,
                finish_buffered: bool = False, retry: Backoff | None = None,
                accept_users: Collection[str] | None = None,
                slow_after: float | None = SLOW_HANDLER_S) -> Consumer:
        with self.server.lock:
            self._check_open_locked()
            q = self.server.queues.get(queue)
            if q is None:
                raise PermanentError(f"queue {queue!r} does not exist; declare it first")
            consumer = _MemoryConsumer(self, queue, handler, prefetch, concurrency, finish_buffered, retry, accept_users,
                                       slow_after)
            self._consumers.append(consumer)
            q.consumers.append(consumer)
            consumer.workers.start()
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
            self.idle.wait_for(lambda: all(c.workers.running == 0 for c in self._consumers))
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
