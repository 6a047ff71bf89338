"""The RabbitMQ adapter's one connection and the one thread that owns it.

A ``pika.SelectConnection`` whose I/O loop runs on a daemon thread of its own
(the *I/O thread*) from the moment the connection opens until it closes: it
alone touches pika, so heartbeats flow whatever the other threads do (a
handler may block for hours), and the CLI can publish and exit without ever
running a loop itself. Other threads hand it work with :meth:`AmqpIO.submit`
(``ioloop.add_callback_threadsafe``, the one thread-safe call of pika's
asynchronous connections). Also here: :func:`translated`, pika's exceptions
turned into spotsweep's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import pika
import pika.exceptions as pe
from pika.adapters.utils import connection_workflow as cw
from pika.channel import Channel

from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError, RetryableError

_log = log.get(__name__)
T = TypeVar("T")


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


def _fail(fut: Future[Any], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)


def _run_into(fut: Future[T], fn: Callable[[], T]) -> None:
    """``fn()``'s result or exception into ``fut`` (re-raised by ``result()`` on the waiting thread)."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as e:  # handed to the waiting thread, which translates it
        fut.set_exception(e)


def _opened(params: pika.ConnectionParameters) -> pika.SelectConnection:
    """A connection opened (its loop driven here until then; pika makes ``connection_attempts``
    tries, ``retry_delay`` apart), or the last try's error raised, as ``BlockingConnection`` raises it."""
    outcome: list[Any] = []

    def done(conn: pika.SelectConnection, result: Any) -> None:
        outcome.append(result)
        conn.ioloop.stop()

    conn = pika.SelectConnection(params, on_open_callback=lambda c: done(c, c),
                                 on_open_error_callback=lambda c, e: done(c, e))
    conn.ioloop.start()
    error = outcome[0]
    if not isinstance(error, BaseException):
        return conn
    conn.ioloop.close()  # its poller's file descriptors
    if isinstance(error, cw.AMQPConnectionWorkflowFailed):
        error = error.exceptions[-1]
        if isinstance(error, cw.AMQPConnectorSocketConnectError):
            error = pe.AMQPConnectionError(error)
        elif isinstance(error, cw.AMQPConnectorPhaseErrorBase):
            error = error.exception
    raise error


class AmqpIO:
    """One open connection, served by its I/O thread until :meth:`close` or its loss."""

    def __init__(self, params: pika.ConnectionParameters, url: str) -> None:
        """Open, or raise pika's error (:func:`_opened`)."""
        self.url = url
        self.conn = _opened(params)
        self.error: BaseException | None = None  # why the connection ended, when we did not close it
        self.closed = threading.Event()
        self._closing = False
        self._lock = threading.RLock()  # guards _pending against the loop's end; re-entrant: stop() from a signal handler
        self._pending: set[Future[Any]] = set()
        self._on_end: list[Callable[[], None]] = []
        self.conn.add_on_close_callback(self._on_connection_closed)
        self.thread = threading.Thread(target=self._serve, name="rabbit-io", daemon=True)
        self.thread.start()

    def on_end(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` on the I/O thread once the loop has ended (pending work failed first)."""
        self._on_end.append(hook)

    def here(self) -> bool:
        """Whether the calling thread is the I/O thread."""
        return self.thread is threading.current_thread()

    # -- any thread ----------------------------------------------------------

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """``fn`` run on the I/O thread (at once when called there); a Future of its result.
        RetryableError when the connection is closed already."""
        fut: Future[T] = Future()
        if self.here():
            _run_into(fut, fn)
            return fut
        self.track(fut)
        try:
            self.conn.ioloop.add_callback_threadsafe(partial(_run_into, fut, fn))
        except Exception as e:  # the loop is going away
            _fail(fut, e)
            raise RetryableError(f"connection to {self.url} is closing") from e
        return fut

    def call(self, fn: Callable[[], T]) -> T:
        """``fn`` run on the I/O thread, waited for; its exception re-raised here."""
        return self.submit(fn).result()

    def ask(self, op: Callable[[Channel, Callable[[Any], None]], None]) -> Any:
        """One synchronous AMQP method, on a channel opened for it: ``op(channel, reply)`` starts
        it on the I/O thread and ``reply`` gets the broker's answer, returned here. A channel
        the broker closes (404, 403) raises its ``ChannelClosedByBroker``. Not on the I/O thread."""
        assert not self.here(), "ask() waits for the I/O thread: never call it there"
        answer: Future[Any] = Future()

        def reply(ch: Channel, frame: Any) -> None:
            if not answer.done():
                answer.set_result(frame)
            ch.close()

        def start() -> None:
            ch = self.conn.channel(on_open_callback=lambda ch: op(ch, partial(reply, ch)))
            ch.add_on_close_callback(lambda _ch, reason: _fail(answer, reason))

        self.track(answer)
        self.call(start)
        return answer.result()

    def track(self, fut: Future[Any]) -> None:
        """Fail ``fut`` when the loop ends before it is done."""
        with self._lock:
            if self.closed.is_set():
                raise RetryableError(f"connection to {self.url} is closed")
            self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)  # atomic; after the loop's end, on a set it dropped

    def wake(self, fn: Callable[[], None]) -> None:
        """``fn`` on the I/O thread soon, unless the connection has closed (nothing to wait on)."""
        try:
            self.submit(fn)
        except RetryableError:
            pass  # closed: nothing left to do

    def close(self) -> None:
        """Close the connection; the loop ends once it has closed. From any thread."""
        self._closing = True
        self.wake(self._close_on_loop)

    # -- the I/O thread --------------------------------------------------------

    def every(self, seconds: float, fn: Callable[[], None]) -> None:
        """``fn`` on the I/O thread every ``seconds`` until the loop ends."""
        def tick() -> None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a bug here must not end the loop, and the connection with it
                _log.exception("broker_tick_failed", url=self.url, error=repr(e))
            self.conn.ioloop.call_later(seconds, tick)

        self.conn.ioloop.call_later(seconds, tick)

    def _close_on_loop(self) -> None:
        if self.conn.is_open:
            self.conn.close()  # _on_connection_closed stops the loop
        elif not self.conn.is_closing:
            self.conn.ioloop.stop()

    def _on_connection_closed(self, _conn: Any, reason: BaseException) -> None:
        if not self._closing:
            self.error = reason
        self.conn.ioloop.stop()

    def _serve(self) -> None:
        try:
            self.conn.ioloop.start()
        except Exception as e:  # noqa: BLE001 - reported as the connection's loss
            self.error = self.error or e
        finally:
            with self._lock:
                self.closed.set()
                pending, self._pending = self._pending, set()
            for fut in pending:
                _fail(fut, RetryableError(f"connection to {self.url} closed"))
            for hook in self._on_end:
                try:
                    hook()
                except Exception as e:  # noqa: BLE001 - one hook's failure must not skip the others
                    _log.warning("broker_teardown_failed", url=self.url, error=repr(e))
            self.conn.ioloop.close()  # its poller's file descriptors
