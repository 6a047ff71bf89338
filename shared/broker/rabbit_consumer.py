"""The RabbitMQ adapter's consumer side: a consumer's channel, its worker threads, its deliveries.

Part of :mod:`spotsweep.shared.broker.rabbit` (its module docstring has the
threading model). Deliveries arrive on the I/O thread and are buffered for
``concurrency`` worker threads; a settle (``ack``/``nack``) is marshalled back
onto the I/O thread through :meth:`RabbitBroker.call`. Also here:
:func:`translated`, pika's exceptions turned into spotsweep's, used by both sides.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions as pe
from pika.adapters.blocking_connection import BlockingChannel

from spotsweep.shared import log
from spotsweep.shared.broker.port import Consumer, Delivery, Handler, invoke
from spotsweep.shared.errors import PermanentError, RetryableError, SpotsweepError

if TYPE_CHECKING:  # rabbit imports this module; the consumer only calls back into its broker
    from spotsweep.shared.broker.rabbit import RabbitBroker

_log = log.get(__name__)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """pika's exceptions -> spotsweep's taxonomy, at the edge."""
    try:
        yield
    except pe.ChannelClosedByBroker as e:
        if e.reply_code in (403, 404, 406):  # access refused, not found, precondition failed
            raise PermanentError(f"{what}: {e.reply_code} {e.reply_text}") from e
        raise RetryableError(f"{what}: {e.reply_code} {e.reply_text}") from e
    except (pe.NackError, pe.UnroutableError) as e:
        raise RetryableError(f"{what}: the broker did not confirm") from e
    except (pe.AMQPError, OSError) as e:
        raise RetryableError(f"{what}: {type(e).__name__}: {e}") from e


class RabbitDelivery(Delivery):
    def __init__(
        self,
        consumer: RabbitConsumer,
        channel: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        props: pika.BasicProperties,
        body: bytes,
    ) -> None:
        self.body = body
        self.headers = dict(props.headers or {})
        self.routing_key = method.routing_key
        self.redelivered = bool(method.redelivered)
        self.message_id = props.message_id
        self.priority = props.priority or 0
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

    def _frames(self) -> Any:
        """The channel to send this delivery's settle on (called on the thread that drives the connection).

        ``BlockingChannel.basic_ack`` runs a nested I/O loop until the frame is
        on the socket, per ack, though a settle already runs inside the loop.
        The asynchronous channel under it only queues the frame, which the
        loop writes on its next turn, in order with everything else (so before
        the connection's close: a drained consumer's acks still go out).
        Without a running loop nothing would write it: the blocking one then.
        """
        impl = getattr(self.channel, "_impl", None)
        return impl if impl is not None and self._consumer.loop_running() else self.channel

    def ack(self) -> None:
        self._consumer.settle(self, "ack", lambda: self._frames().basic_ack(self.tag))

    def nack(self, requeue: bool = True) -> None:
        self._consumer.settle(self, "nack", lambda: self._frames().basic_nack(self.tag, requeue=requeue))

    @classmethod
    def ack_many(cls, deliveries: Sequence[Delivery]) -> None:
        by_consumer: dict[RabbitConsumer, list[RabbitDelivery]] = {}
        for d in deliveries:
            assert isinstance(d, RabbitDelivery)
            by_consumer.setdefault(d._consumer, []).append(d)
        for consumer, group in by_consumer.items():
            consumer.ack_many(group)


class RabbitConsumer(Consumer):
    """A channel with its prefetch, and ``concurrency`` worker threads fed from a buffer."""

    def __init__(self, broker: RabbitBroker, queue: str, handler: Handler, concurrency: int,
                 finish_buffered: bool = False) -> None:
        # When cancelled, buffered deliveries not yet started are nacked with
        # requeue, which marks them redelivered; with ``finish_buffered`` (a
        # handler that can settle them without doing the work: the agent
        # republishes a trial unmarked, then acks) the workers get them instead.
        self.finish_buffered = finish_buffered
        self._broker = broker
        self.queue = queue
        self._handler = handler
        self._cond = threading.Condition()
        self.buffer: deque[RabbitDelivery] = deque()
        self.unacked: set[RabbitDelivery] = set()  # buffered, running, or left for a later ack
        self.running = 0
        self.cancelled = False
        self.broker_cancelled = False
        self._channel: BlockingChannel | None = None
        self._tag: str | None = None
        self.threads = [
            threading.Thread(target=self._work, name=f"rabbit-consumer-{queue}-{i}", daemon=True)
            for i in range(max(1, concurrency))
        ]
        for t in self.threads:
            t.start()

    def loop_running(self) -> bool:
        """Whether this thread is running the broker's I/O loop (see :meth:`RabbitDelivery._frames`)."""
        return self._broker.drives_loop()

    def started(self, channel: BlockingChannel, tag: str) -> None:
        self._channel, self._tag = channel, tag

    def on_broker_cancel(self, _method: object) -> None:
        """On the I/O thread: RabbitMQ cancelled us (queue deleted, leader moved)."""
        self.broker_cancelled = True

    def lost(self) -> bool:
        """Closed or cancelled by the broker, not by us."""
        if self.cancelled:
            return False
        return self.broker_cancelled or (self._channel is not None and self._channel.is_closed)

    def close_reason(self) -> str | None:
        """What the broker said when it closed this consumer's channel, if it did."""
        if self.broker_cancelled:
            return "the broker cancelled the consumer (queue deleted or moved)"
        reason = getattr(self._channel, "_closing_reason", None)  # pika keeps the ChannelClosedByBroker here
        if isinstance(reason, pe.ChannelClosedByBroker):
            return f"{reason.reply_code} {reason.reply_text}"
        return None

    def on_message(
        self, ch: BlockingChannel, method: pika.spec.Basic.Deliver, props: pika.BasicProperties, body: bytes
    ) -> None:
        """On the I/O thread: hand the delivery to a worker, never run the handler here."""
        delivery = RabbitDelivery(self, ch, method, props, body)
        with self._cond:
            self.unacked.add(delivery)
            self.buffer.append(delivery)
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self.buffer and not self.cancelled:
                    self._cond.wait()
                if not self.buffer:
                    return
                delivery = self.buffer.popleft()
                self.running += 1
            try:
                invoke(self._handler, delivery)
            finally:
                with self._cond:
                    self.running -= 1
                if self._broker.stopping:
                    self._broker.wake()  # a draining loop re-checks now (a stop after this point wakes it itself)

    def settle(self, delivery: RabbitDelivery, what: str, op: Callable[[], None]) -> None:
        if not delivery.claim():
            _log.warning("delivery_already_settled", queue=self.queue, message_id=delivery.message_id, op=what)
            return

        def do() -> None:
            try:
                op()
            finally:
                self._forget(delivery, on_io=True)

        def failed(error: BaseException) -> None:
            # The channel is gone, so the broker redelivers the message: at-least-once holds.
            _log.warning("settle_failed", queue=self.queue, message_id=delivery.message_id, op=what, error=str(error))
            self._forget(delivery, on_io=False)

        # Sent without waiting for the I/O thread (a thread hop fewer per
        # message): it goes out after whatever this thread published before.
        self._submit(do, what, failed)

    def _submit(self, do: Callable[[], None], what: str, failed: Callable[[BaseException], None]) -> None:
        """Run ``do`` on the I/O thread; ``failed`` with the translated error if it or the hand-over fails."""

        def check(fut: Future[None]) -> None:
            try:
                with translated(f"{what} on {self._broker.url}"):
                    fut.result()
            except SpotsweepError as e:
                failed(e)

        try:
            self._broker.submit(do).add_done_callback(check)
        except SpotsweepError as e:
            failed(e)

    def ack_many(self, deliveries: list[RabbitDelivery]) -> None:
        """Ack them all in one call onto the I/O thread."""
        fresh = []
        for d in deliveries:
            if d.claim():
                fresh.append(d)
            else:
                _log.warning("delivery_already_settled", queue=self.queue, message_id=d.message_id, op="ack")

        def do() -> None:
            try:
                for d in fresh:
                    d._frames().basic_ack(d.tag)
            finally:
                for d in fresh:
                    self._forget(d, on_io=True)

        def failed(error: BaseException) -> None:
            _log.warning("settle_failed", queue=self.queue, deliveries=len(fresh), op="ack", error=str(error))
            for d in fresh:
                self._forget(d, on_io=False)

        self._submit(do, "ack", failed)

    def _forget(self, delivery: RabbitDelivery, *, on_io: bool) -> None:
        with self._cond:
            self.unacked.discard(delivery)
            done = self.cancelled and not self.unacked
        if on_io and done and self._channel is not None and self._channel.is_open:
            try:
                self._channel.close()  # a cancelled consumer's channel has nothing left to settle
            except pe.AMQPError:
                pass

    def cancel(self) -> None:
        try:
            self._broker.call(self.cancel_on_io)
        except RetryableError:
            self.release()  # the connection is closed: nothing more will come anyway

    def cancel_on_io(self) -> None:
        """Stop deliveries; buffered ones not yet started go back to the queue (or, with
        ``finish_buffered``, to the workers, which end once the buffer is empty)."""
        with self._cond:
            if self.cancelled:
                return
            self.cancelled = True
            buffered = [] if self.finish_buffered else list(self.buffer)
            if not self.finish_buffered:
                self.buffer.clear()
            self._cond.notify_all()
        if self._channel is None or not self._channel.is_open:
            return
        try:
            self._channel.basic_cancel(self._tag or "")
            for d in buffered:
                if d.claim():
                    self._channel.basic_nack(d.tag, requeue=True)
        except pe.AMQPError as e:
            _log.warning("consumer_cancel_failed", queue=self.queue, error=repr(e))
        for d in buffered:
            self._forget(d, on_io=True)

    def release(self) -> None:
        """The connection is gone (RabbitMQ requeues what was unacked): let the workers end."""
        with self._cond:
            self.cancelled = True
            self.buffer.clear()
            self.unacked.clear()
            self._cond.notify_all()
