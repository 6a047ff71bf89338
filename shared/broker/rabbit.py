"""The RabbitMQ adapter, on pika's BlockingConnection.

Threading model (why it looks like this): a BlockingConnection is not thread
safe and only sends heartbeats while someone drives its I/O. So exactly one
thread drives it at a time:

* While :meth:`RabbitBroker.run` loops, its thread is the *I/O thread*: it
  alone touches pika. Handlers run on per-consumer worker threads; their
  ``ack``/``nack``/``publish`` are marshalled onto the I/O thread with
  ``add_callback_threadsafe`` and the worker waits on a Future. A handler may
  block for hours while heartbeats keep flowing.
* While nobody runs the loop (the CLI publishes a spec and exits), calls drive
  the connection directly, one at a time under ``_direct``.

Publishing uses a connection of its own (a ``pika.SelectConnection`` on its
own thread, :mod:`.rabbit_publisher`) with a channel in confirm mode, so
``publish`` returns after the broker's confirm; confirms are tracked, not
waited for one message at a time, so no thread blocks on a round trip per
message and publishes from many threads are in flight together; a publish
never waits behind this connection's deliveries and acks, nor they behind it.
Each consumer has its own channel with its own ``basic_qos`` prefetch. Only
pika's public API is used. ``stop`` only sets flags and wakes the loop (safe from
a signal handler); the loop cancels consumers, drains, and closes.

The consumer side and :func:`translated` live in :mod:`.rabbit_consumer` (re-exported here).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import pika
import pika.exceptions as pe
from pika.adapters.blocking_connection import BlockingChannel

from spotsweep.shared import log
from spotsweep.shared.broker.port import DRAIN_GRACE_S, SLOW_HANDLER_S, Broker, Consumer, Handler, Outgoing
from spotsweep.shared.broker.rabbit_consumer import RabbitConsumer, translated
from spotsweep.shared.broker.rabbit_consumer import RabbitDelivery as RabbitDelivery  # re-exported
from spotsweep.shared.broker.rabbit_publisher import ConfirmPublisher
from spotsweep.shared.errors import PermanentError, RetryableError, SpotsweepError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.redact import scrub
from spotsweep.shared.settings import redact_url
from spotsweep.shared.tls import AmqpTls, amqp_context, refusal
from spotsweep.shared.topology import DEAD_LETTER_EXCHANGE, EXCHANGES, QueueSpec

_log = log.get(__name__)
T = TypeVar("T")

IO_TICK_S = 1.0  # the loop re-checks its stop flag at least this often (a flag set from a signal handler)


def _done(fn: Callable[[], T]) -> Future[T]:
    """``fn()`` run here, as a completed Future (its exception kept for ``result()``)."""
    fut: Future[T] = Future()
    try:
        fut.set_result(fn())
    except BaseException as e:  # re-raised by result(), on the caller's thread
        fut.set_exception(e)
    return fut


def _queue_arguments(spec: QueueSpec) -> dict[str, Any]:
    args: dict[str, Any] = dict(spec.arguments)
    if spec.max_priority:
        args["x-max-priority"] = spec.max_priority
    if spec.dead_letter:
        args["x-dead-letter-exchange"] = DEAD_LETTER_EXCHANGE
    return args


def _exchange(name: str, kind: str | None, ch: BlockingChannel) -> None:
    """Declare an exchange; ``kind`` None: only check that it exists (passive)."""
    if kind is None:
        ch.exchange_declare(name, passive=True)
    else:
        ch.exchange_declare(name, kind, durable=True)


def _queue(spec: QueueSpec, passive: bool, ch: BlockingChannel) -> None:
    if passive:
        ch.queue_declare(spec.name, passive=True)
    else:
        ch.queue_declare(spec.name, durable=not spec.exclusive, exclusive=spec.exclusive, auto_delete=spec.exclusive,
                         arguments=_queue_arguments(spec))


def vhost_refused(error: pe.ProbableAccessDeniedError, vhost: str) -> str:
    """What pika's ``ProbableAccessDeniedError`` means, naming ``vhost``: RabbitMQ closed the
    connection at its Open step, so the vhost does not exist or the user may not use it.
    The broker's own reason (``NOT_ALLOWED - vhost x not found``) is quoted; it holds no password."""
    return (f"it refused vhost {vhost!r} ({broker_reason(error) or 'access denied'}): the vhost in "
            f"SPOTSWEEP_AMQP_URL must exist and its user have permissions on it (rabbitmqctl add_vhost {vhost}; "
            f"rabbitmqctl set_permissions -p {vhost} USER '.*' '.*' '.*')")


def broker_reason(error: pe.AMQPConnectionError) -> str:
    """The reply text RabbitMQ closed the connection with, as pika wraps it in its error's first argument."""
    said = str(error.args[0]) if error.args else ""
    return said.split("'", 1)[1].rstrip("'") if said.count("'") >= 2 else said


class RabbitBroker(Broker):
    def __init__(
        self,
        url: str,
        heartbeat: int = 15,
        *,
        connection_attempts: int = 3,
        retry_delay: float = 2.0,
        socket_timeout: float = 10.0,
        tls: AmqpTls | None = None,
    ) -> None:
        """``tls``: the CA and client certificate files for an ``amqps://`` URL
        (:mod:`spotsweep.shared.tls`); both connections (consuming, publishing) use them."""
        self.url = redact_url(url)
        try:
            params = pika.URLParameters(url)
        except ValueError as e:
            raise PermanentError(f"bad broker URL {self.url}: {scrub(str(e), url)}") from None  # pika quotes the password's pieces
        if params.ssl_options is not None:  # amqps://: verify the broker's certificate and hostname
            params.ssl_options = pika.SSLOptions(amqp_context(tls or AmqpTls()), server_hostname=params.host)
        elif tls:
            raise PermanentError(f"SPOTSWEEP_AMQP_CA_FILE/CERT_FILE/KEY_FILE are set but the broker URL {self.url} is "
                                 "plain amqp://: use amqps:// (RabbitMQ's TLS port, 5671 by default)")
        params.heartbeat = heartbeat
        params.connection_attempts = connection_attempts
        params.retry_delay = retry_delay
        params.socket_timeout = socket_timeout
        # Under a broker resource alarm a publish would wait forever (and the
        # I/O thread with it); give up and reconnect instead.
        params.blocked_connection_timeout = 60
        self._params = params
        try:
            self._conn = pika.BlockingConnection(params)
        except pe.ProbableAccessDeniedError as e:
            # Retryable: a service that loses its permissions while running waits for them back (/readyz 503);
            # at a service's start it is a refusal for good (health_startup), and the CLI says it after a retry.
            raise RetryableError(f"cannot connect to RabbitMQ at {self.url}: {vhost_refused(e, params.virtual_host)}") from e
        except (pe.AMQPError, OSError) as e:
            if (refused := refusal(e, "RabbitMQ", self.url, "SPOTSWEEP_AMQP_CA_FILE")) is not None:
                raise refused from None
            # pika's message may quote the parameters; name only the redacted URL.
            raise RetryableError(f"cannot connect to RabbitMQ at {self.url} ({type(e).__name__})") from e
        self._channel: BlockingChannel | None = None  # for declarations
        self._publisher: ConfirmPublisher | None = None
        self._publisher_lock = threading.Lock()
        # Held to drive the connection without the loop; guards the fields below.
        # Re-entrant so that stop() from a signal handler cannot deadlock its own thread.
        self._direct = threading.RLock()
        self._io_thread: threading.Thread | None = None
        self._pending: set[Future[Any]] = set()
        self._consumers: list[RabbitConsumer] = []
        self._stop_requested = False
        self._drain = True
        self._closed = threading.Event()

    # -- marshalling ---------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (which touches pika) on the thread that may: see the module docstring."""
        return self.submit(fn).result()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Like :meth:`call`, without waiting: a Future of ``fn``'s result (done
        already when this thread may drive the connection itself)."""
        if self._io_thread is threading.current_thread():
            return _done(fn)
        with self._direct:
            if self._closed.is_set():
                raise RetryableError(f"connection to {self.url} is closed")
            if self._io_thread is None:
                return _done(fn)
            fut: Future[T] = Future()
            self._pending.add(fut)
            try:
                self._conn.add_callback_threadsafe(lambda: self._run_callback(fut, fn))
            except Exception as e:  # the connection is going away
                self._pending.discard(fut)
                raise RetryableError(f"connection to {self.url} is closing") from e
        return fut

    def _run_callback(self, fut: Future[T], fn: Callable[[], T]) -> None:
        with self._direct:
            self._pending.discard(fut)
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except BaseException as e:  # handed to the waiting thread, which translates it
            fut.set_exception(e)

    def drives_loop(self) -> bool:
        """Whether the calling thread is the I/O thread running :meth:`run`'s loop."""
        return self._io_thread is threading.current_thread()

    @property
    def stopping(self) -> bool:
        """A stop was requested (the loop is draining or about to close)."""
        return self._stop_requested

    def wake(self) -> None:
        """Make the loop re-check its state now rather than at the next tick."""
        if self._io_thread is not None and self._io_thread is not threading.current_thread():
            try:
                self._conn.add_callback_threadsafe(lambda: None)
            except Exception:
                pass  # closing anyway

    # -- the port ------------------------------------------------------------

    def _confirm_channel(self) -> BlockingChannel:
        if self._channel is None or not self._channel.is_open:
            self._channel = self._conn.channel()
            self._channel.confirm_delivery()
        return self._channel

    def _confirm_publisher(self) -> ConfirmPublisher:
        """The publishing connection, opened on first use and again after it was lost."""
        with self._publisher_lock:
            if self._closed.is_set():
                raise RetryableError(f"connection to {self.url} is closed")
            if self._publisher is None or not self._publisher.is_open:
                self._publisher = ConfirmPublisher(self._params, self.url)
            return self._publisher

    def declare(self, queues: Iterable[QueueSpec]) -> None:
        """Declare what this broker user may configure; what it may not (403, a user with
        least privilege: docs/security.md) must exist already, and is only checked."""
        specs = list(queues)

        def do() -> None:
            for ex in EXCHANGES:
                self._declare_or_check(partial(_exchange, ex.name, ex.type), partial(_exchange, ex.name, None),
                                       f"exchange {ex.name!r}")
            for spec in specs:
                declared = self._declare_or_check(partial(_queue, spec, False), partial(_queue, spec, True),
                                                  f"queue {spec.name!r}")
                for exchange, key in spec.bindings:
                    if exchange and declared:  # the default exchange binds every queue by name
                        self._confirm_channel().queue_bind(spec.name, exchange, routing_key=key)

        with translated(f"declare on {self.url}"):
            self.call(do)

    def _declare_or_check(self, declare: Callable[[BlockingChannel], object], check: Callable[[BlockingChannel], object],
                          what: str) -> bool:
        """``declare``; when the broker refuses it (403), ``check`` that it exists (False). On the I/O thread."""
        try:
            declare(self._confirm_channel())
            return True
        except pe.ChannelClosedByBroker as e:
            if e.reply_code != 403:
                raise
        try:
            check(self._confirm_channel())  # a refusal closed the channel: a new one
        except pe.ChannelClosedByBroker as e:
            if e.reply_code == 404:
                raise RetryableError(f"{what} does not exist yet, and this broker user may not declare it: the planner "
                                     "(or deploy/rabbitmq/definitions.json) declares it") from e
            raise
        return False

    def consumers(self, queue: str) -> int | None:
        counts = self._queue_counts(queue)
        return None if counts is None else counts[1]

    def queue_depth(self, queue: str) -> int | None:
        counts = self._queue_counts(queue)
        return None if counts is None else counts[0]

    def _queue_counts(self, queue: str) -> tuple[int, int] | None:
        """(messages, consumers) of ``queue`` from a passive declare; None when it does not exist."""
        def do() -> tuple[int, int] | None:
            ch = self._conn.channel()  # its own: a passive declare of a missing queue closes the channel
            try:
                ok = ch.queue_declare(queue, passive=True)
            except pe.ChannelClosedByBroker as e:
                if e.reply_code == 404:
                    return None
                raise
            ch.close()
            return int(ok.method.message_count), int(ok.method.consumer_count)

        with translated(f"inspect queue {queue!r} on {self.url}"):
            return self.call(do)

    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        pairs = list(bindings)

        def do() -> str:
            ch = self._confirm_channel()
            name: str = ch.queue_declare("", exclusive=True, auto_delete=True).method.queue
            for exchange, key in pairs:
                ch.queue_bind(name, exchange, routing_key=key)
            return name

        with translated(f"declare private queue on {self.url}"):
            return self.call(do)

    def publish(self, message: Outgoing) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Outgoing]) -> None:
        # Blocks this (worker) thread only; the I/O thread goes on serving
        # the connection until the confirms come back.
        self.publish_async(messages).result()

    def publish_async(self, messages: Sequence[Outgoing]) -> Future[None]:
        # Safe from any thread, the I/O thread included: the Future completes
        # on the publisher's thread once the broker has confirmed every message.
        try:
            return self._confirm_publisher().send(messages)
        except SpotsweepError as e:
            failed: Future[None] = Future()
            failed.set_exception(e)
            return failed

    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1,
                finish_buffered: bool = False, retry: Backoff | None = None,
                accept_users: Collection[str] | None = None,
                slow_after: float | None = SLOW_HANDLER_S) -> Consumer:
        consumer = RabbitConsumer(self, queue, handler, concurrency, finish_buffered, retry, accept_users, slow_after)

        def do() -> tuple[BlockingChannel, str]:
            ch = self._conn.channel()
            ch.basic_qos(prefetch_count=prefetch)
            ch.add_on_cancel_callback(consumer.on_broker_cancel)
            return ch, ch.basic_consume(queue, consumer.on_message)

        try:
            with translated(f"consume {queue!r} on {self.url}"):
                ch, tag = self.call(do)
        except BaseException:
            consumer.release()
            raise
        consumer.started(ch, tag)
        self._consumers.append(consumer)
        if self._stop_requested:  # raced with stop(): the loop's cancel pass may have missed it
            consumer.cancel()
        return consumer

    def run(self) -> None:
        me = threading.current_thread()
        with self._direct:
            if self._closed.is_set():
                return
            owner = self._io_thread is None
            if owner:
                self._io_thread = me
        if not owner:  # someone else drives the connection: just wait for the end
            self._closed.wait()
            return
        error: BaseException | None = None
        try:
            self._loop()
        except (pe.AMQPError, OSError) as e:
            error = e
        finally:
            self._teardown()
        if error is not None:
            raise RetryableError(f"lost the connection to {self.url}: {type(error).__name__}") from error

    def stop(self, drain: bool = True) -> None:
        with self._direct:
            self._drain = drain and (self._drain or not self._stop_requested)  # drain=False wins
            self._stop_requested = True
            io = self._io_thread
        me = threading.current_thread()
        if io is me or self._closed.is_set():
            return  # on the I/O thread (a signal handler, say): the loop sees the flag
        on_worker = any(me in c.threads for c in self._consumers)
        if io is None:
            # Nobody drives the connection: drive the shutdown ourselves (in the
            # background when a handler stops its own connection: drain waits for it).
            if on_worker:
                threading.Thread(target=self._run_quietly, name="rabbit-broker-stop", daemon=True).start()
            else:
                self._run_quietly()
            return
        self.wake()
        if not on_worker:
            self._closed.wait()

    def _run_quietly(self) -> None:
        try:
            self.run()
        except RetryableError as e:
            _log.warning("broker_stop_connection_lost", url=self.url, error=str(e))

    # -- the loop ------------------------------------------------------------

    def _loop(self) -> None:
        shutting_down = False
        grace_until: float | None = None
        while True:
            if self._stop_requested:
                if not shutting_down:
                    shutting_down = True
                    for c in self._consumers:
                        c.cancel_on_io()
                if not self._drain:
                    return
                if all(c.running == 0 for c in self._consumers):
                    if all(not c.unacked for c in self._consumers):
                        return
                    now = time.monotonic()
                    grace_until = grace_until or now + DRAIN_GRACE_S
                    if now >= grace_until:
                        _log.warning("drain_grace_expired", unacked=sum(len(c.unacked) for c in self._consumers))
                        return
            if not self._conn.is_open:  # lost while a marshalled call used it (that caller saw the error)
                raise pe.ConnectionWrongStateError("the connection closed")
            lost = [c for c in self._consumers if c.lost()]
            if lost:
                # The broker closed or cancelled a consumer (consumer_timeout,
                # queue deleted): its deliveries are void. Start over on a new
                # connection rather than go quiet, or run a trial twice.
                self.close_reason = lost[0].close_reason()
                _log.error("broker_closed_consumer", queue=lost[0].queue, reason=self.close_reason)
                raise pe.ChannelWrongStateError(f"the broker closed or cancelled a consumer: {self.close_reason}")
            self._conn.process_data_events(time_limit=IO_TICK_S)

    def _teardown(self) -> None:
        try:
            if self._conn.is_open:
                self._conn.close()
        except Exception as e:  # closing a broken connection: nothing left to save
            _log.debug("broker_close_failed", url=self.url, error=repr(e))
        with self._direct:
            self._closed.set()
            self._io_thread = None
            pending, self._pending = self._pending, set()
        for fut in pending:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(RetryableError(f"connection to {self.url} closed"))
        for c in self._consumers:
            c.release()
        # Last (a confirm's callback may still hand an ack to this connection,
        # which fails at once now): after the consumers' connection, so a
        # drained handler's publishes were confirmed.
        with self._publisher_lock:
            publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.close()
