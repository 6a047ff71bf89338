"""Process life of a service: connect with backoff, run, stop on signals.

First SIGTERM (or Ctrl-C) drains: consumers stop taking messages, running
handlers finish, then the connection closes (workers stop before the
connection, so heartbeats keep flowing while they finish). A second signal
exits at once; unacked messages go back to the queue.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import TypeVar

from spotsweep.shared import log
from spotsweep.shared.broker import Broker, connect
from spotsweep.shared.middleware import Backoff, retrying

_log = log.get("spotsweep.runtime")
T = TypeVar("T")


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the job ran and something failed (e.g. a trial of a --wait sweep)
    USAGE = 2  # bad arguments or an invalid spec
    UNAVAILABLE = 69  # a dependency (broker, database, S3) cannot be reached (sysexits EX_UNAVAILABLE)
    TIMEOUT = 124
    KILLED = 137  # second signal: stopped without draining


STARTUP_BACKOFF = Backoff(base=0.5, cap=10.0, attempts=12)


def with_startup_retries(fn: Callable[[], T], what: str) -> T:
    """Dependencies may start after us (compose, k8s): retry for about a minute."""
    return retrying(fn, STARTUP_BACKOFF, what=what)  # type: ignore[return-value]


def connect_broker(url: str, heartbeat: int) -> Broker:
    return with_startup_retries(lambda: connect(url, heartbeat=heartbeat), "connect to RabbitMQ")


def install_signals(on_first: Callable[[], None], on_second: Callable[[], None] | None = None) -> None:
    """SIGTERM/SIGINT: first calls ``on_first`` (drain), second ``on_second`` then exits."""
    count = {"n": 0}

    def handler(signum: int, _frame: object) -> None:
        count["n"] += 1
        if count["n"] == 1:
            _log.info("signal: draining (send again to stop now)", signal=signal.Signals(signum).name)
            threading.Thread(target=on_first, name="drain", daemon=True).start()
        else:
            _log.warning("second signal: stopping now", signal=signal.Signals(signum).name)
            if on_second is not None:
                on_second()
            os._exit(ExitCode.KILLED)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
