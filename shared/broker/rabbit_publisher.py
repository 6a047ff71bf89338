"""Publisher confirms without a round trip per message, for the RabbitMQ adapter.

pika's ``BlockingChannel`` in confirm mode sends one message and waits for its
confirm before it returns, so every publish costs a broker round trip (and an
fsync wait for persistent messages) *on the I/O thread*: nothing else on the
connection moves meanwhile, and a batch of N costs N round trips. RabbitMQ's
documented alternative is to publish a window of messages and track the
confirms as they come back ("handling publisher confirms asynchronously"). A
:class:`ConfirmPublisher` does that on the channel under the blocking one:
:meth:`send` writes the frames and returns a Future at once; the Future
completes (on the thread that drives the connection) when the broker has
confirmed every message of the batch, fails with :class:`RetryableError` if
any was nacked, and with the channel's error if the broker closes it (404 for
an unknown exchange is a :class:`PermanentError`).

It uses two pika internals, ``BlockingChannel._impl`` (the asynchronous
channel) and ``BlockingChannel._flush_output`` (what pika's own blocking calls
use to wait for a frame); pika is pinned below 2.0 in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

import pika
from pika.adapters.blocking_connection import BlockingConnection

from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit_consumer import translated
from spotsweep.shared.errors import RetryableError, SpotsweepError


def properties(m: Outgoing) -> pika.BasicProperties:
    return pika.BasicProperties(delivery_mode=2, message_id=m.message_id, headers=dict(m.headers), priority=m.priority)


class _Batch:
    """Messages of one ``send``: done when the last of them is confirmed."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.nacked = 0
        self.future: Future[None] = Future()
        if n == 0:
            self.future.set_result(None)

    def settle(self, ok: bool) -> None:
        self.left -= 1
        self.nacked += not ok
        if self.left == 0 and not self.future.done():
            if self.nacked:
                self.future.set_exception(RetryableError(f"the broker refused (nacked) {self.nacked} message(s)"))
            else:
                self.future.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class ConfirmPublisher:
    """A channel in confirm mode whose confirms are tracked by delivery tag.

    Every method runs on the thread that drives the connection (the adapter's
    I/O thread, or a caller holding its direct lock): pika is not thread safe.
    """

    def __init__(self, conn: BlockingConnection, url: str) -> None:
        self._url = url
        self._blocking = conn.channel()
        self._channel = self._blocking._impl
        self._waiting: dict[int, _Batch] = {}  # delivery tag -> its batch, in tag order
        self._next_tag = 1
        self._error: BaseException | None = None
        ready: list[bool] = []
        self._channel.add_on_close_callback(self._on_close)
        self._channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _frame: ready.append(True))
        self._blocking._flush_output(lambda: bool(ready))

    @property
    def is_open(self) -> bool:
        return self._error is None and self._channel.is_open

    def send(self, messages: Sequence[Outgoing]) -> Future[None]:
        """Write every message; the Future completes once all are confirmed."""
        batch = _Batch(len(messages))
        for m in messages:
            self._channel.basic_publish(m.exchange, m.routing_key, m.body, properties(m))
            self._waiting[self._next_tag] = batch
            self._next_tag += 1
        return batch.future

    def wait_here(self, future: Future[None]) -> None:
        """Drive the connection on this thread until ``future`` is done (nobody else does)."""
        self._blocking._flush_output(future.done)

    def fail(self, error: BaseException) -> None:
        """The connection is gone: every unconfirmed batch fails (its messages may or may not have landed)."""
        self._error = self._error or error
        waiting, self._waiting = self._waiting, {}
        for batch in waiting.values():
            batch.fail(error)

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        ok = isinstance(method, pika.spec.Basic.Ack)
        tag = method.delivery_tag
        if not method.multiple:
            batch = self._waiting.pop(tag, None)
            if batch is not None:
                batch.settle(ok)
            return
        while self._waiting:  # "multiple": every tag up to this one; tags are in order
            first = next(iter(self._waiting))
            if first > tag:
                break
            self._waiting.pop(first).settle(ok)

    def _on_close(self, _channel: object, reason: BaseException) -> None:
        error: BaseException = RetryableError(f"publish to {self._url}: channel closed ({reason})")
        try:
            with translated(f"publish to {self._url}"):
                raise reason
        except SpotsweepError as e:
            error = e
        except BaseException:  # noqa: BLE001 - not a pika error: keep the generic one
            pass
        self.fail(error)
