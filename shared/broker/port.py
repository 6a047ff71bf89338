"""The broker port: what services need from a message broker, nothing more.

Semantics both adapters share (the contract tests in tests/shared/broker pin
them down):

* ``publish`` returns only once the broker has confirmed the message
  (publisher confirms); it raises :class:`RetryableError` when it could not.
  ``publish_async`` returns at once, with a Future for those confirms.
* A consumer's handler runs on a worker thread, never on the I/O thread, so a
  handler may block (an agent runs a trial for hours) while heartbeats flow.
  ``Delivery.ack``/``nack`` and ``publish`` are safe from any thread.
* At-least-once: a delivery that is neither acked nor nacked when its consumer
  or connection goes away is redelivered with ``redelivered=True``.
* ``nack(requeue=False)`` dead-letters the message to the dead-letter queue.
* ``stop()`` stops taking deliveries, lets running handlers finish (drain),
  then closes the connection; ``stop(drain=False)`` closes at once and the
  unacked deliveries go back to the queue.
* Adapters only deliver, ack and nack: a consumer's worker threads, its
  drain and how a failed handler's delivery is settled are the dispatcher's
  (:mod:`.dispatch`), the same for both. A handler acks on success itself.
* A second ``ack``/``nack`` of the same delivery is logged and ignored.
* Every publish carries the AMQP ``user_id`` of the connection's own broker
  user (``Outgoing.user_id`` None), which RabbitMQ validates against the
  login: another value is refused (406 PRECONDITION_FAILED, a
  :class:`PermanentError`), so ``Delivery.user_id`` names who really sent a
  message. ``consume(accept_users=...)`` has the dispatcher dead-letter any
  delivery from another user before its handler sees it (docs/security.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spotsweep.shared.topology import QueueSpec

if TYPE_CHECKING:  # the dispatcher imports this module
    from spotsweep.shared.middleware import Backoff

# After the drained handlers have returned, how long ``stop(drain=True)`` still
# waits for deliveries settled later from another thread (BatchingHandler's
# flush) before it closes and lets the rest be redelivered.
DRAIN_GRACE_S = 5.0
# A delivery whose handler runs longer is logged as slow (a consumer may say None: never).
SLOW_HANDLER_S = 5.0


class Delivery(ABC):
    """One message handed to a consumer."""

    body: bytes
    headers: dict[str, Any]
    routing_key: str
    redelivered: bool
    message_id: str | None
    priority: int = 0
    queue: str = ""  # the queue it came from
    connection: Broker | None = None  # the connection it came on (the dispatcher dead-letters through it)
    user_id: str | None = None  # the sender's broker user, as the broker validated it (None: not set)

    @abstractmethod
    def ack(self) -> None: ...

    @abstractmethod
    def nack(self, requeue: bool = True) -> None:
        """``requeue=False`` dead-letters the message."""

    @classmethod
    def ack_many(cls, deliveries: Sequence[Delivery]) -> None:
        """Ack deliveries of this adapter; an adapter may do it in one step."""
        for d in deliveries:
            d.ack()


def ack_all(deliveries: Sequence[Delivery]) -> None:
    """Ack a batch: one step per adapter that can (RabbitMQ: one hop to its I/O
    thread for the whole batch instead of one round trip through it per ack)."""
    by_kind: dict[type, list[Delivery]] = {}
    for d in deliveries:
        by_kind.setdefault(type(d), []).append(d)
    for kind, group in by_kind.items():
        ack_many = getattr(kind, "ack_many", None)  # test doubles need not subclass Delivery
        if ack_many is not None:
            ack_many(group)
        else:
            for d in group:
                d.ack()


Handler = Callable[[Delivery], None]


@dataclass(frozen=True)
class Outgoing:
    exchange: str  # "" is the default exchange: routing_key is then a queue name
    routing_key: str
    body: bytes
    headers: dict[str, Any] = field(default_factory=dict)
    message_id: str | None = None
    priority: int = 0
    # The AMQP user_id; None: the connection's own user. Another user's name is
    # refused by the broker (it cannot be forged), so only tests set it.
    user_id: str | None = None


class Consumer(ABC):
    @abstractmethod
    def cancel(self) -> None:
        """Stop new deliveries to this consumer; unacked ones stay with it until acked."""


class Broker(ABC):
    # Why the last :meth:`run` ended, when the broker said (a channel closed by
    # RabbitMQ with its reply code and text); None for a plain connection loss.
    close_reason: str | None = None

    @abstractmethod
    def declare(self, queues: Iterable[QueueSpec]) -> None:
        """Declare the topology's exchanges and these queues. Idempotent, safe concurrently."""

    @abstractmethod
    def publish(self, message: Outgoing) -> None:
        """Publish persistently and wait for the broker's confirm."""

    def publish_many(self, messages: Sequence[Outgoing]) -> None:
        """Publish several and wait for all confirms. Adapters may pipeline."""
        for m in messages:
            self.publish(m)

    def publish_async(self, messages: Sequence[Outgoing]) -> Future[None]:
        """Publish persistently without waiting: the Future completes once the broker has
        confirmed every message, or fails with the error :meth:`publish` would raise.
        Messages published from one thread keep their order. Default: synchronous."""
        done: Future[None] = Future()
        try:
            self.publish_many(messages)
        except Exception as e:  # handed to whoever waits, as the RabbitMQ adapter does
            done.set_exception(e)
        else:
            done.set_result(None)
        return done

    @abstractmethod
    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1,
                finish_buffered: bool = False, retry: Backoff | None = None,
                accept_users: Collection[str] | None = None,
                slow_after: float | None = SLOW_HANDLER_S) -> Consumer:
        """Deliver messages of ``queue`` to ``handler`` on ``concurrency`` worker threads
        (:class:`~spotsweep.shared.broker.dispatch.Workers`), settled by the one policy.

        ``retry``: how a :class:`RetryableError` is retried in place before the delivery is
        requeued. ``finish_buffered``: on cancel, deliveries fetched but not started still go
        to ``handler`` (which may settle them without the work) rather than back to the queue,
        whence they would come back marked redelivered. ``accept_users``: only deliveries whose
        validated ``user_id`` is one of these reach ``handler``; any other is dead-lettered
        (None: every sender). ``slow_after``: a longer handler run is logged as slow (None: never)."""

    @abstractmethod
    def consumers(self, queue: str) -> int | None:
        """How many consumers ``queue`` has now; None when no one declared it yet.
        (``submit`` and ``status`` warn when no agent reads a class's trials.)"""

    def queue_depth(self, queue: str) -> int | None:
        """How many messages wait in ``queue`` (the planner's ``spotsweep_queue_depth`` metric);
        None when no one declared it yet, or the adapter cannot tell."""
        return None

    @abstractmethod
    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        """An exclusive, auto-deleted queue bound as given (broadcasts); returns its name."""

    @abstractmethod
    def run(self) -> None:
        """Block, serving I/O and dispatching deliveries, until :meth:`stop`."""

    @abstractmethod
    def stop(self, drain: bool = True) -> None:
        """Thread-safe. Stop consumers, drain handlers (if ``drain``), close."""

    def heard_age(self) -> float | None:
        """Seconds since the broker last sent this connection anything (a heartbeat frame counts); None when
        the adapter cannot tell (the agent's hold on its trials is then never armed: services/agent/hold.py)."""
        return None

    def abandon(self, reason: str) -> None:
        """Thread-safe. Close now as a lost connection (its unacked deliveries go back), saying ``reason``."""
        self.close_reason = reason
        self.stop(drain=False)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(drain=False)
