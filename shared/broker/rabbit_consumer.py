"""The RabbitMQ adapter's consumer side: a consumer's channel and its deliveries.

A consumer has a channel of its own on the one connection (:mod:`.rabbit_io`),
with its own ``basic_qos`` prefetch. Deliveries arrive on the I/O thread and
are pushed to the dispatcher's worker threads (:class:`~.dispatch.Workers`),
never handled there; a settle (``ack``/``nack``) is handed back to the I/O
thread with :meth:`AmqpIO.submit`, without waiting for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future

import pika
import pika.exceptions as pe
from pika.channel import Channel

from spotsweep.shared import log
from spotsweep.shared.broker.dispatch import Workers
from spotsweep.shared.broker.port import SLOW_HANDLER_S, Broker, Consumer, Delivery, Handler
from spotsweep.shared.broker.rabbit_io import AmqpIO, translated
from spotsweep.shared.errors import RetryableError, SpotsweepError
from spotsweep.shared.middleware import Backoff

_log = log.get(__name__)


class RabbitDelivery(Delivery):
    def __init__(self, consumer: RabbitConsumer, channel: Channel, method: pika.spec.Basic.Deliver,
                 props: pika.BasicProperties, body: bytes) -> None:
        self.body = body
        self.headers = dict(props.headers or {})
        self.routing_key = method.routing_key
        self.redelivered = bool(method.redelivered)
        self.message_id = props.message_id
        self.priority = props.priority or 0
        self.user_id = props.user_id  # validated by RabbitMQ against the sender's login
        self.queue = consumer.queue
        self.connection = consumer.broker
        self.tag: int = method.delivery_tag
        self.channel = channel
        self._consumer = consumer
        self._lock = threading.Lock()
        self._settled = False

    def claim(self) -> bool:
        """True for the first settle of this delivery only."""
        with self._lock:
            first, self._settled = not self._settled, True
        return first

    def ack(self) -> None:
        self._consumer.settle([self], "ack", lambda d: d.channel.basic_ack(d.tag))

    def nack(self, requeue: bool = True) -> None:
        self._consumer.settle([self], "nack", lambda d: d.channel.basic_nack(d.tag, requeue=requeue))

    @classmethod
    def ack_many(cls, deliveries: Sequence[Delivery]) -> None:
        by_consumer: dict[RabbitConsumer, list[RabbitDelivery]] = {}
        for d in deliveries:
            assert isinstance(d, RabbitDelivery)
            by_consumer.setdefault(d._consumer, []).append(d)
        for consumer, group in by_consumer.items():  # one hop to the I/O thread per consumer
            consumer.settle(group, "ack", lambda d: d.channel.basic_ack(d.tag))


class RabbitConsumer(Consumer):
    """A channel with its prefetch; its worker threads are the dispatcher's (:class:`Workers`)."""

    def __init__(self, broker: Broker, io: AmqpIO, queue: str, handler: Handler, concurrency: int,
                 on_idle: Callable[[], None], finish_buffered: bool = False, retry: Backoff | None = None,
                 accept_users: Collection[str] | None = None, slow_after: float | None = SLOW_HANDLER_S) -> None:
        # When cancelled, buffered deliveries not yet started are nacked with
        # requeue, which marks them redelivered; with ``finish_buffered`` (a
        # handler that can settle them without doing the work: the agent
        # republishes a trial unmarked, then acks) the workers get them instead.
        self.broker = broker  # the deliveries' connection (the dispatcher dead-letters through it)
        self._io = io
        self.queue = queue
        self._cond = threading.Condition()
        self.unacked: set[RabbitDelivery] = set()  # buffered, running, or left for a later ack
        self.cancelled = False
        self.broker_cancelled = False
        self.channel: Channel | None = None
        self._tag: str | None = None
        self._closed_by: BaseException | None = None  # why the channel closed
        kw = {} if retry is None else {"retry": retry}
        self.workers = Workers(queue, handler, concurrency, finish_buffered=finish_buffered, on_idle=on_idle,
                               accept_users=accept_users, slow_after=slow_after, **kw)
        self.threads = self.workers.threads
        self.buffer = self.workers.buffer  # deliveries not started yet (the dispatcher's)
        self.workers.start()

    def start(self, channel: Channel, prefetch: int, started: Future[None]) -> None:
        """On the I/O thread: consume on ``channel`` (just opened); ``started`` once the broker said so."""
        self.channel = channel
        channel.add_on_cancel_callback(self.on_broker_cancel)

        def closed(_ch: Channel, reason: BaseException) -> None:
            self._closed_by = reason
            if not started.done():
                started.set_exception(reason)

        def consuming(_frame: object) -> None:
            if not started.done():
                started.set_result(None)

        def consume(_frame: object) -> None:
            self._tag = channel.basic_consume(self.queue, self.on_message, callback=consuming)

        channel.add_on_close_callback(closed)
        channel.basic_qos(prefetch_count=prefetch, callback=consume)

    def on_broker_cancel(self, _method: object) -> None:
        """On the I/O thread: RabbitMQ cancelled us (queue deleted, leader moved)."""
        self.broker_cancelled = True

    def lost(self) -> bool:
        """Closed or cancelled by the broker, not by us."""
        if self.cancelled:
            return False
        return self.broker_cancelled or (self.channel is not None and self.channel.is_closed)

    def close_reason(self) -> str | None:
        """What the broker said when it closed or cancelled this consumer (RabbitMQ's consumer_timeout
        says ``PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out ...``)."""
        if self.broker_cancelled:
            return "the broker cancelled the consumer (queue deleted or moved)"
        if isinstance(self._closed_by, pe.ChannelClosedByBroker):
            return f"{self._closed_by.reply_code} {self._closed_by.reply_text}"
        return "the broker closed the consumer's channel"

    def on_message(self, ch: Channel, method: pika.spec.Basic.Deliver, props: pika.BasicProperties, body: bytes) -> None:
        """On the I/O thread: hand the delivery to a worker, never run the handler here."""
        delivery = RabbitDelivery(self, ch, method, props, body)
        with self._cond:
            self.unacked.add(delivery)
        self.workers.push(delivery)

    def settle(self, deliveries: list[RabbitDelivery], what: str, op: Callable[[RabbitDelivery], None]) -> None:
        """``op`` each delivery not settled before, on the I/O thread, sent without waiting for it
        (a thread hop fewer per message): it goes out after whatever this thread published before."""
        fresh = []
        for d in deliveries:
            if d.claim():
                fresh.append(d)
            else:
                _log.warning("delivery_already_settled", queue=self.queue, message_id=d.message_id, op=what)

        def do() -> None:
            try:
                for d in fresh:
                    op(d)
            finally:
                for d in fresh:
                    self._forget(d, on_io=True)

        def check(fut: Future[None]) -> None:
            try:
                with translated(f"{what} on {self._io.url}"):
                    fut.result()
            except SpotsweepError as e:
                failed(e)

        def failed(error: BaseException) -> None:
            # The channel is gone, so the broker redelivers the messages: at-least-once holds.
            _log.warning("settle_failed", queue=self.queue, deliveries=len(fresh), op=what, error=str(error))
            for d in fresh:
                self._forget(d, on_io=False)

        try:
            self._io.submit(do).add_done_callback(check)
        except SpotsweepError as e:
            failed(e)

    def _forget(self, delivery: RabbitDelivery, *, on_io: bool) -> None:
        with self._cond:
            self.unacked.discard(delivery)
            done = self.cancelled and not self.unacked
        if on_io and done and self.channel is not None and self.channel.is_open:
            try:
                self.channel.close()  # a cancelled consumer's channel has nothing left to settle
            except pe.AMQPError:
                pass

    def cancel(self) -> None:
        try:
            self._io.call(self.cancel_on_io)
        except RetryableError:
            self.release()  # the connection is closed: nothing more will come anyway

    def cancel_on_io(self) -> None:
        """Stop deliveries; buffered ones not yet started go back to the queue (or, with
        ``finish_buffered``, to the workers, which end once the buffer is empty)."""
        with self._cond:
            if self.cancelled:
                return
            self.cancelled = True
        buffered = [d for d in self.workers.cancel() if isinstance(d, RabbitDelivery)]
        if self.channel is None or not self.channel.is_open:
            return
        try:
            self.channel.basic_cancel(self._tag or "")
            for d in buffered:
                if d.claim():
                    self.channel.basic_nack(d.tag, requeue=True)
        except pe.AMQPError as e:
            _log.warning("consumer_cancel_failed", queue=self.queue, error=repr(e))
        for d in buffered:
            self._forget(d, on_io=True)

    def release(self) -> None:
        """The connection is gone (RabbitMQ requeues what was unacked): let the workers end."""
        with self._cond:
            self.cancelled = True
            self.unacked.clear()
        self.workers.release()
