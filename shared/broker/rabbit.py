"""The RabbitMQ adapter: one connection per process, on pika's public API.

One ``pika.SelectConnection``, owned by its I/O thread (:mod:`.rabbit_io`),
both consumes and publishes. Handlers run on per-consumer worker threads
(:mod:`.rabbit_consumer`, :mod:`.dispatch`) and hand their ``ack``/``nack``
and ``publish`` to the I/O thread, so a handler may block for hours while
heartbeats keep flowing, and nobody needs to run a loop for a call to work
(the CLI publishes a spec and exits). Publishes are confirmed without a round
trip per message (:mod:`.rabbit_publisher`). ``stop`` only sets flags and
wakes the loop (safe from a signal handler); the loop, which also looks every
``IO_TICK_S``, cancels consumers, drains, and closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import pika
import pika.exceptions as pe
from pika.channel import Channel

from spotsweep.shared import log
from spotsweep.shared.broker.port import DRAIN_GRACE_S, SLOW_HANDLER_S, Broker, Consumer, Handler, Outgoing
from spotsweep.shared.broker.rabbit_consumer import RabbitConsumer
from spotsweep.shared.broker.rabbit_io import AmqpIO, translated
from spotsweep.shared.broker.rabbit_publisher import Confirms, login_user
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.redact import scrub
from spotsweep.shared.settings import redact_url
from spotsweep.shared.tls import AmqpTls, amqp_context, refusal
from spotsweep.shared.topology import DEAD_LETTER_EXCHANGE, EXCHANGES, QueueSpec

_log = log.get(__name__)

IO_TICK_S = 0.5  # the loop re-checks its stop flag at least this often (a flag set from a signal handler)
Reply = Callable[[Any], None]


def _queue_arguments(spec: QueueSpec) -> dict[str, Any]:
    args: dict[str, Any] = dict(spec.arguments)
    if spec.max_priority:
        args["x-max-priority"] = spec.max_priority
    if spec.dead_letter:
        args["x-dead-letter-exchange"] = DEAD_LETTER_EXCHANGE
    return args


def _exchange(name: str, kind: str | None, ch: Channel, reply: Reply) -> None:
    """Declare an exchange; ``kind`` None: only check that it exists (passive)."""
    if kind is None:
        ch.exchange_declare(name, passive=True, callback=reply)
    else:
        ch.exchange_declare(name, kind, durable=True, callback=reply)


def _queue(spec: QueueSpec, passive: bool, ch: Channel, reply: Reply) -> None:
    if passive:
        ch.queue_declare(spec.name, passive=True, callback=reply)
    else:
        ch.queue_declare(spec.name, durable=not spec.exclusive, exclusive=spec.exclusive, auto_delete=spec.exclusive,
                         arguments=_queue_arguments(spec), callback=reply)


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
    def __init__(self, url: str, heartbeat: int = 15, *, connection_attempts: int = 3, retry_delay: float = 2.0,
                 socket_timeout: float = 10.0, tls: AmqpTls | None = None) -> None:
        """``tls``: the CA and client certificate files for an ``amqps://`` URL
        (:mod:`spotsweep.shared.tls`)."""
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
        # Under a broker resource alarm a publish would wait forever for its confirm; give up and reconnect instead.
        params.blocked_connection_timeout = 60
        try:
            self._io = AmqpIO(params, self.url)
        except pe.ProbableAccessDeniedError as e:
            # Retryable: a service that loses its permissions while running waits for them back (/readyz 503);
            # at a service's start it is a refusal for good (health_startup), and the CLI says it after a retry.
            raise RetryableError(f"cannot connect to RabbitMQ at {self.url}: {vhost_refused(e, params.virtual_host)}") from e
        except (pe.AMQPError, OSError) as e:
            if (refused := refusal(e, "RabbitMQ", self.url, "SPOTSWEEP_AMQP_CA_FILE")) is not None:
                raise refused from None
            # pika's message may quote the parameters; name only the redacted URL.
            raise RetryableError(f"cannot connect to RabbitMQ at {self.url} ({type(e).__name__})") from e
        self._confirms = Confirms(self._io, login_user(params))
        self._consumers: list[RabbitConsumer] = []
        self._stop_requested = False
        self._drain = True
        self._grace_until: float | None = None
        self._runners: set[threading.Thread] = set()  # threads waiting in run()
        self._heard = (-1, time.monotonic())  # (bytes received, when that count was first seen): heard_age
        self._io.on_end(self._release)
        self._io.every(IO_TICK_S, self._tick)

    # -- the port ------------------------------------------------------------

    def declare(self, queues: Iterable[QueueSpec]) -> None:
        """Declare what this broker user may configure; what it may not (403, a user with
        least privilege: docs/security.md) must exist already, and is only checked."""
        with translated(f"declare on {self.url}"):
            for ex in EXCHANGES:
                self._declare_or_check(partial(_exchange, ex.name, ex.type), partial(_exchange, ex.name, None),
                                       f"exchange {ex.name!r}")
            for spec in queues:
                declared = self._declare_or_check(partial(_queue, spec, False), partial(_queue, spec, True),
                                                  f"queue {spec.name!r}")
                for exchange, key in spec.bindings:
                    if exchange and declared:  # the default exchange binds every queue by name
                        self._io.ask(partial(_bind, spec.name, exchange, key))

    def _declare_or_check(self, declare: Callable[[Channel, Reply], None], check: Callable[[Channel, Reply], None],
                          what: str) -> bool:
        """``declare``; when the broker refuses it (403), ``check`` that it exists (False)."""
        try:
            self._io.ask(declare)
            return True
        except pe.ChannelClosedByBroker as e:
            if e.reply_code != 403:
                raise
        try:
            self._io.ask(check)
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
        with translated(f"inspect queue {queue!r} on {self.url}"):
            try:
                ok = self._io.ask(lambda ch, reply: ch.queue_declare(queue, passive=True, callback=reply))
            except pe.ChannelClosedByBroker as e:
                if e.reply_code == 404:
                    return None
                raise
        return int(ok.method.message_count), int(ok.method.consumer_count)

    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        with translated(f"declare private queue on {self.url}"):
            ok = self._io.ask(lambda ch, reply: ch.queue_declare("", exclusive=True, auto_delete=True, callback=reply))
            name: str = ok.method.queue
            for exchange, key in bindings:
                self._io.ask(partial(_bind, name, exchange, key))
        return name

    def publish(self, message: Outgoing) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Outgoing]) -> None:
        # Blocks this (worker) thread only; the I/O thread goes on serving
        # the connection until the confirms come back.
        self.publish_async(messages).result()

    def publish_async(self, messages: Sequence[Outgoing]) -> Future[None]:
        # Safe from any thread, the I/O thread included: the Future completes
        # on the I/O thread once the broker has confirmed every message.
        return self._confirms.send(messages)

    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1,
                finish_buffered: bool = False, retry: Backoff | None = None,
                accept_users: Collection[str] | None = None,
                slow_after: float | None = SLOW_HANDLER_S) -> Consumer:
        consumer = RabbitConsumer(self, self._io, queue, handler, concurrency, self._idle, finish_buffered, retry,
                                  accept_users, slow_after)
        started: Future[None] = Future()
        try:
            with translated(f"consume {queue!r} on {self.url}"):
                self._io.track(started)
                self._io.call(lambda: self._io.conn.channel(
                    on_open_callback=lambda ch: consumer.start(ch, prefetch, started)))
                started.result()
            self._io.call(lambda: self._consumers.append(consumer))  # the loop's list, changed there only
        except BaseException:
            consumer.release()
            raise
        if self._stop_requested:  # raced with stop(): the loop's cancel pass may have missed it
            consumer.cancel()
        return consumer

    def run(self) -> None:
        """Wait until the connection has closed; RetryableError when it was lost rather than stopped."""
        me = threading.current_thread()
        self._runners.add(me)
        try:
            self._io.closed.wait()
        finally:
            self._runners.discard(me)
        if self._io.error is not None:
            error = self._io.error
            raise RetryableError(f"lost the connection to {self.url}: {type(error).__name__}") from error

    def heard_age(self) -> float | None:
        """Seconds since bytes last came in, to the I/O tick (a frozen loop's count does not move)."""
        return time.monotonic() - self._heard[1]

    def abandon(self, reason: str) -> None:
        def close() -> None:
            self.close_reason = reason
            self._io.error = self._io.error or pe.ConnectionWrongStateError(reason)
            self._io.close()

        self._io.wake(close)

    def stop(self, drain: bool = True) -> None:
        self._drain = drain and (self._drain or not self._stop_requested)  # drain=False wins
        self._stop_requested = True
        me = threading.current_thread()
        if self._io.here() or me in self._runners:
            return  # a signal handler, say: the loop sees the flag at its next tick
        self._io.wake(self._tick)
        if not any(me in c.threads for c in self._consumers):  # a handler waiting for its own drain never would
            self._io.closed.wait()

    # -- the I/O thread --------------------------------------------------------

    def _idle(self) -> None:
        """A consumer's workers have nothing running: a draining loop re-checks now."""
        if self._stop_requested:
            self._io.wake(self._tick)

    def _tick(self) -> None:
        """The loop's look at its flags: drain and close once stopped; end on a lost consumer."""
        if self._io.closed.is_set() or not self._io.conn.is_open:
            return
        if self._io.conn.bytes_received != self._heard[0]:
            self._heard = (self._io.conn.bytes_received, time.monotonic())
        if self._stop_requested:
            for c in self._consumers:
                c.cancel_on_io()
            if self._drained():
                self._io.close()
            return
        lost = [c for c in self._consumers if c.lost()]
        if lost:
            # The broker closed or cancelled a consumer (consumer_timeout,
            # queue deleted): its deliveries are void. Start over on a new
            # connection rather than go quiet, or run a trial twice.
            self.close_reason = lost[0].close_reason()
            _log.error("broker_closed_consumer", queue=lost[0].queue, reason=self.close_reason)
            self._io.error = pe.ChannelWrongStateError(f"the broker closed or cancelled a consumer: {self.close_reason}")
            self._io.close()

    def _drained(self) -> bool:
        """Whether a stopping loop may close: handlers returned, their deliveries settled and
        publishes confirmed (or the grace spent)."""
        if not self._drain:
            return True
        if any(c.workers.running for c in self._consumers):
            return False
        if all(not c.unacked for c in self._consumers) and not self._confirms.in_flight:
            return True
        now = time.monotonic()
        self._grace_until = self._grace_until or now + DRAIN_GRACE_S
        if now < self._grace_until:
            return False
        _log.warning("drain_grace_expired", unacked=sum(len(c.unacked) for c in self._consumers))
        return True

    def _release(self) -> None:
        """The connection is gone: RabbitMQ requeues what was unacked, the workers end."""
        for c in self._consumers:
            c.release()


def _bind(queue: str, exchange: str, key: str, ch: Channel, reply: Reply) -> None:
    ch.queue_bind(queue, exchange, routing_key=key, callback=reply)
