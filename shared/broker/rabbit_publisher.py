"""Publisher confirms without a round trip per message, on the one connection's I/O thread.

pika's ``BlockingChannel`` in confirm mode waits for each message's confirm, so
a batch of N would cost N broker round trips (and fsync waits). As RabbitMQ
documents ("handling publisher confirms asynchronously"), a :class:`Confirms`
publishes a window of messages on a confirm-mode channel of the consumers'
connection (:mod:`.rabbit_io`) and tracks the confirms as they come back.
Messages are written in the order handed over, so one thread's publishes keep
their order (and go out before that thread's later acks).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial

import pika
from pika.channel import Channel

from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit_io import AmqpIO, translated
from spotsweep.shared.errors import RetryableError, SpotsweepError


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


class Confirms:
    """A channel in confirm mode whose confirms are tracked by delivery tag.

    Every method but :meth:`send` runs on the I/O thread.
    """

    def __init__(self, io: AmqpIO, user: str | None) -> None:
        self._io = io
        self._user = user
        self._channel: Channel | None = None  # ready for messages
        self._opening = False
        self._waiting: dict[int, _Batch] = {}  # delivery tag -> its batch, in tag order
        self._backlog: list[_Batch] = []  # handed over while no channel was ready
        self._next_tag = 1
        io.on_end(lambda: self.fail(RetryableError(f"connection to {io.url} closed before the broker confirmed")))

    def send(self, messages: Sequence[Outgoing]) -> Future[None]:
        """Publish every message; the Future completes once all are confirmed."""
        batch = _Batch(messages)
        if messages:
            try:
                self._io.submit(lambda: self._write(batch)).add_done_callback(partial(self._written, batch))
            except SpotsweepError as e:
                batch.fail(RetryableError(f"publish to {self._io.url}: {e}"))
        return batch.future

    def _written(self, batch: _Batch, handed: Future[None]) -> None:
        """The batch fails when it could not be written (or the loop ended before it was)."""
        error = handed.exception()
        if error is not None:
            batch.fail(error if isinstance(error, SpotsweepError) else
                       RetryableError(f"publish to {self._io.url}: {type(error).__name__}: {error}"))

    @property
    def in_flight(self) -> bool:
        """Messages wait for their confirm (a drain waits for them)."""
        return bool(self._waiting or self._backlog)

    def fail(self, error: BaseException) -> None:
        """Every batch not confirmed yet fails (its messages may or may not have landed)."""
        waiting, self._waiting = self._waiting, {}
        backlog, self._backlog = self._backlog, []
        for batch in [*waiting.values(), *backlog]:
            batch.fail(error)

    def _write(self, batch: _Batch) -> None:
        channel = self._channel
        if channel is None or not channel.is_open:
            self._backlog.append(batch)  # written once a channel is ready
            self._open()
            return
        for m in batch.messages:
            channel.basic_publish(m.exchange, m.routing_key, m.body, properties(m, self._user))
            self._waiting[self._next_tag] = batch
            self._next_tag += 1

    def _open(self) -> None:
        if not self._opening and self._io.conn.is_open:
            self._opening = True
            self._io.conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel: Channel) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _frame: self._ready(channel))

    def _ready(self, channel: Channel) -> None:
        self._channel, self._next_tag, self._opening = channel, 1, False
        backlog, self._backlog = self._backlog, []
        for batch in backlog:
            self._write(batch)

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
        self._channel, self._opening = None, False
        try:
            with translated(f"publish to {self._io.url}"):
                raise reason  # pika's ChannelClosed or ConnectionClosed: one of spotsweep's errors now
        except SpotsweepError as error:
            waiting, self._waiting = self._waiting, {}
            for batch in waiting.values():
                batch.fail(error)
        if self._backlog:
            self._open()  # for the messages handed over meanwhile
