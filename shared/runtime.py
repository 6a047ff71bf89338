"""Process life of a service: connect with backoff, run, stop on signals.

First SIGTERM (or Ctrl-C) drains: consumers stop taking messages, running
handlers finish, then the connection closes (workers stop before the
connection, so heartbeats keep flowing while they finish). A second signal
exits at once; unacked messages go back to the queue.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import TypeVar

from spotsweep.shared import log
from spotsweep.shared.broker import Broker, connect
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.middleware import Backoff, retrying
from spotsweep.shared.settings import Settings
from spotsweep.shared.tls import AmqpTls, amqp_tls

_log = log.get("spotsweep.runtime")
T = TypeVar("T")


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the job ran and something failed (e.g. a trial of a --wait sweep)
    USAGE = 2  # bad arguments or an invalid spec
    UNAVAILABLE = 69  # a dependency (broker, database, S3) cannot be reached (sysexits EX_UNAVAILABLE)
    UNSAFE = 78  # an insecure setup refused at start until a flag allows it (sysexits EX_CONFIG): UnsafeSetup
    TIMEOUT = 124
    INTERRUPTED = 130  # Ctrl-C
    KILLED = 137  # second signal: stopped without draining


STARTUP_BACKOFF = Backoff(base=0.5, cap=10.0, attempts=12)


def with_startup_retries(fn: Callable[[], T], what: str) -> T:
    """Dependencies may start after us (compose, k8s): retry for about a minute."""
    return retrying(fn, STARTUP_BACKOFF, what=what)  # type: ignore[return-value]


CLI_BACKOFF = Backoff(base=0.5, cap=2.0, attempts=4)  # a person is waiting: give up after a few seconds


def connect_broker(url: str, heartbeat: int, patience: Backoff | None = None, tls: AmqpTls | None = None) -> Broker:
    """Connect, retrying: services wait about a minute (``STARTUP_BACKOFF``), the CLI a few seconds.
    ``tls``: the settings' CA and client certificate files (``amqp_tls(settings)``)."""
    # One try per round: the rounds are the retries (pika's own three tries, 2 s apart,
    # made each round last 4 s more, and the CLI wait 19 s to say the broker is away).
    return retrying(lambda: connect(url, heartbeat=heartbeat, tls=tls, connection_attempts=1),  # type: ignore[return-value]
                    patience or STARTUP_BACKOFF, what="connect to RabbitMQ")


def broker_factory(settings: Settings) -> Callable[[], Broker]:
    """What :func:`serve` calls for each (re)connection."""
    return lambda: connect_broker(settings.amqp_url.get_secret_value(), settings.heartbeat, tls=amqp_tls(settings))


def install_signals(on_first: Callable[[], None], on_second: Callable[[], None] | None = None) -> None:
    """SIGTERM/SIGINT: first calls ``on_first`` (drain), second ``on_second`` then exits."""
    count = {"n": 0}

    def drain(name: str) -> None:
        _log.info("signal: draining (send again to stop now)", signal=name)
        on_first()

    def handler(signum: int, _frame: object) -> None:
        # No logging here: the handler may interrupt a thread that holds the
        # log stream's lock, and would then wait for itself forever.
        count["n"] += 1
        if count["n"] == 1:
            threading.Thread(target=drain, args=(signal.Signals(signum).name,), name="drain", daemon=True).start()
        else:
            os.write(2, b"second signal: stopping now\n")
            if on_second is not None:
                on_second()
            os._exit(ExitCode.KILLED)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


Cleanup = Callable[[], None]
RECONNECT_BACKOFF = Backoff(base=1.0, cap=30.0)


def serve(connect_fn: Callable[[], Broker], start: Callable[[Broker], Cleanup | None],
          on_drain: Callable[[], None] | None = None, on_kill: Callable[[], None] | None = None,
          backoff: Backoff = RECONNECT_BACKOFF, watch: Callable[[Callable[[], None]], None] | None = None) -> int:
    """Run a service until a signal stops it, reconnecting (backoff, jitter) when the broker goes away:
    unacked messages go back to their queues, and nothing is lost because nothing is acked before its
    effects are committed. ``start(broker)`` declares and consumes on a fresh connection (and may return
    a cleanup run after the connection's loop ends). ``watch(drain)`` gets the drain the first signal
    triggers, for watchers that start it otherwise (preemption notices); such a drain is not a signal:
    the platform's SIGTERM after it still drains, and only a second signal stops at once."""
    current: dict[str, Broker] = {}
    stopping = threading.Event()
    rng = random.Random()

    def drain() -> None:
        stopping.set()
        if on_drain is not None:
            on_drain()
        broker = current.get("broker")
        if broker is not None:
            broker.stop(drain=True)

    install_signals(drain, on_kill)
    if watch is not None:
        watch(drain)
    failures = 0
    while not stopping.is_set():
        cleanup: Cleanup | None = None
        try:
            broker = current["broker"] = connect_fn()
            cleanup = start(broker)
            if stopping.is_set():  # a signal raced the start
                broker.stop(drain=True)
            failures = 0
            broker.run()
        except RetryableError as e:
            half_started = current.get("broker")
            if half_started is not None:  # start() may have failed half-way: free its threads
                try:
                    half_started.stop(drain=False)
                except Exception:  # noqa: BLE001 - the connection is already broken
                    pass
            failures += 1
            pause = backoff.delay(min(failures, 10), rng)
            # Logged before the cleanup, which may wait (a flush to a database on the same cut link).
            _log.warning("broker connection lost; reconnecting", error=str(e), pause_s=round(pause, 1))
            if cleanup is not None:  # at once, not after the pause: e.g. trials whose delivery died
                cleanup()
                cleanup = None
            stopping.wait(pause)
        finally:
            if cleanup is not None:
                cleanup()
    return ExitCode.OK
