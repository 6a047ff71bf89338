"""Publisher confirms without a round trip per message, on pika's public asynchronous API.

pika's ``BlockingChannel`` in confirm mode sends one message and waits for its
confirm before it returns, so every publish costs a broker round trip (and an
fsync wait for persistent messages) on the thread that drives the connection,
and a batch of N costs N round trips. RabbitMQ's documented alternative is to
publish a window of messages and track the confirms as they come back
("handling publisher confirms asynchronously"). A :class:`ConfirmPublisher`
does that on a connection of its own: a ``pika.SelectConnection`` whose I/O
loop runs on the publisher's thread, with one channel in confirm mode.

:meth:`send` is safe from any thread: it hands the messages to that loop
(``ioloop.add_callback_threadsafe``, the one thread-safe call pika's
asynchronous connections have) and returns a Future at once; the Future
completes, on the publisher's thread, when the broker has confirmed every
message of the batch, fails with :class:`RetryableError` if any was nacked,
and with the channel's error if the broker closes it (404 for an unknown
exchange is a :class:`PermanentError`), after which a new channel is opened
for the next messages. Messages are written in the order they were handed
over, so one thread's publishes keep their order. Every message carries the
AMQP ``user_id`` of this connection's login (:func:`properties`), which
RabbitMQ checks: a message naming another user closes the channel with 406.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pika
from pika.channel import Channel

from spotsweep.shared import log
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit_consumer import translated
from spotsweep.shared.errors import RetryableError, SpotsweepError

_log = log.get(__name__)


def properties(m: Outgoing, user: str | None = None) -> pika.BasicProperties:
    """Persistent, with the message's ``user_id`` or else ``user`` (the connection's login), which
    RabbitMQ validates: consumers may then trust who sent it (docs/security.md)."""
    return pika.BasicProperties(delivery_mode=2, message_id=m.message_id, headers=dict(m.headers), priority=m.priority,
                                user_id=m.user_id or user)


def login_user(params: pika.ConnectionParameters) -> str | None:
    """The broker user ``params`` log in as (None for EXTERNAL, certificate, logins: RabbitMQ then
    takes the user from the certificate, which the client cannot name here)."""
    username = getattr(params.credentials, "username", None)
    return username if isinstance(username, str) and username else None


class _Batch:
    """Messages of one ``send``: done when the last of them is confirmed."""

    def __init__(self, messages: Sequence[Outgoing]) -> None:
        self.messages = list(messages)
        self.left = len(self.messages)
        self.nacked = 0
        self.future: Future[None] = Future()
        if self.left == 0:
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
    """A connection of its own, with one channel in confirm mode whose confirms are tracked by delivery tag.

    Every method but :meth:`send` and :meth:`close` runs on the publisher's thread.
    """

    def __init__(self, params: pika.ConnectionParameters, url: str, open_timeout: float = 30.0) -> None:
        self._url = url
        self._params = params
        self._user = login_user(params)
        self._opened = threading.Event()
        self._error: BaseException | None = None  # why the connection ended (or never opened)
        self._conn: pika.SelectConnection | None = None
        self._channel: Channel | None = None
        self._waiting: dict[int, _Batch] = {}  # delivery tag -> its batch, in tag order
        self._backlog: list[_Batch] = []  # handed over while no channel was ready
        self._next_tag = 1
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="rabbit-publisher", daemon=True)
        self._thread.start()
        if not self._opened.wait(open_timeout) or self._channel is None:
            self.close()
            raise RetryableError(f"cannot open a publishing connection to {url}: {self._error or 'timed out'}")

    @property
    def is_open(self) -> bool:
        return self._error is None and not self._closing and self._thread.is_alive()

    # -- any thread ----------------------------------------------------------

    def send(self, messages: Sequence[Outgoing]) -> Future[None]:
        """Publish every message; the Future completes once all are confirmed."""
        batch = _Batch(messages)
        if not messages:
            return batch.future
        conn = self._conn
        if conn is None or not self.is_open:
            batch.fail(RetryableError(f"publish to {self._url}: the publishing connection is closed"))
            return batch.future
        try:
            conn.ioloop.add_callback_threadsafe(lambda: self._write(batch))
        except Exception as e:  # noqa: BLE001 - the loop is gone
            batch.fail(RetryableError(f"publish to {self._url}: the publishing connection is closing ({e!r})"))
        return batch.future

    def close(self) -> None:
        """Close the connection (unconfirmed batches fail) and end the thread."""
        self._closing = True
        conn = self._conn
        if conn is not None:
            try:
                conn.ioloop.add_callback_threadsafe(self._close_on_loop)
            except Exception:  # noqa: BLE001 - already stopped
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(10)
        self.fail(RetryableError(f"connection to {self._url} closed before the broker confirmed"))

    def fail(self, error: BaseException) -> None:
        """Every batch not confirmed yet fails (its messages may or may not have landed)."""
        waiting, self._waiting = self._waiting, {}
        backlog, self._backlog = self._backlog, []
        for batch in [*waiting.values(), *backlog]:
            batch.fail(error)

    # -- the publisher's thread ------------------------------------------------

    def _run(self) -> None:
        try:
            self._conn = pika.SelectConnection(self._params, on_open_callback=self._on_open,
                                               on_open_error_callback=self._on_open_error,
                                               on_close_callback=self._on_connection_closed)
            self._conn.ioloop.start()
        except Exception as e:  # noqa: BLE001 - reported to whoever waits
            self._error = self._error or e
        finally:
            self._opened.set()
            self.fail(RetryableError(f"connection to {self._url} closed before the broker confirmed"))

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, _conn: Any, error: BaseException) -> None:
        self._error = error
        self._stop_loop()

    def _on_connection_closed(self, _conn: Any, reason: BaseException) -> None:
        self._error = self._error or reason
        self._channel = None
        self.fail(RetryableError(f"publish to {self._url}: connection closed ({type(reason).__name__})"))
        self._stop_loop()

    def _on_channel(self, channel: Channel) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _frame: self._ready(channel))

    def _ready(self, channel: Channel) -> None:
        self._channel, self._next_tag = channel, 1
        self._opened.set()
        backlog, self._backlog = self._backlog, []
        for batch in backlog:
            self._write(batch)

    def _write(self, batch: _Batch) -> None:
        channel = self._channel
        if channel is None or not channel.is_open:
            self._backlog.append(batch)  # a new channel is opening: written once it is ready
            return
        for m in batch.messages:
            channel.basic_publish(m.exchange, m.routing_key, m.body, properties(m, self._user))
            self._waiting[self._next_tag] = batch
            self._next_tag += 1

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

    def _on_channel_closed(self, _channel: Channel, reason: BaseException) -> None:
        self._channel = None
        error: BaseException = RetryableError(f"publish to {self._url}: channel closed ({reason})")
        try:
            with translated(f"publish to {self._url}"):
                raise reason
        except SpotsweepError as e:
            error = e
        except BaseException:  # noqa: BLE001 - not a pika error: keep the generic one
            pass
        waiting, self._waiting = self._waiting, {}
        for batch in waiting.values():
            batch.fail(error)
        conn = self._conn
        if conn is not None and conn.is_open and not self._closing:
            conn.channel(on_open_callback=self._on_channel)  # for the next messages (and the backlog)

    def _close_on_loop(self) -> None:
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()  # _on_connection_closed stops the loop
        elif conn is not None and not conn.is_closing:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._conn is not None:
            self._conn.ioloop.stop()
