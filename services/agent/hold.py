"""The agent's hold on its running attempts: a lease, renewed while its broker connection lives.

RabbitMQ hands a running attempt to another agent once it declares the
holder's connection dead: 2 to 3 heartbeat intervals ``T``
(``SPOTSWEEP_HEARTBEAT``) after it last heard from it. pika sends a frame at
least every ``T/2``, so that is never sooner than ``1.5 T`` after the agent
went silent (frozen by SIGSTOP, a VM pause, a swap storm). The agent holds
its attempts on a lease of ``L = T/2``: its keeper thread renews the lease
every ``L/4`` while the connection is open and the broker was heard within
``1.5 T`` (pika's own check gives up later, after ``T + 5`` to ``2 (T + 5)``).

Each renewal goes to the watchdog process too (:mod:`.watchdog`), which is
not frozen with the agent: when a renewal is ``L`` late it SIGKILLs every
running trial, ``T`` before the broker can redeliver. The agent, once it
runs again, finds the lapse (:meth:`Hold.held`) without waiting for any
thread: a run that lived through one is lost (not reported, redelivered),
and the keeper closes the connection, so its deliveries go back now.

:func:`step` is the keeper's pure decision; no thread or clock in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from spotsweep.shared import log

_log = log.get("spotsweep.agent")
Verdict = Literal["renew", "wait", "lapsed"]
LAPSED = ("the agent's hold on its running trials lapsed (the agent was frozen, or its broker went unheard): "
          "they were killed, and the broker hands them out again")


def clock() -> float:
    """Seconds that go on counting while the machine is suspended (CLOCK_BOOTTIME), where there is one."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


@dataclass(frozen=True)
class HoldState:
    renewed: float | None = None  # the last renewal; None: not held (never yet, or since a lapse)
    since: float = float("-inf")  # a renewal needs the broker heard after this (the last lapse)
    lapses: int = 0


def step(state: HoldState, now: float, heard: float | None, lease: float, window: float) -> tuple[HoldState, Verdict]:
    """The keeper's look at ``now``: renew when the broker was ``heard`` within ``window`` (and since the last
    lapse); a lapse when the last renewal is over ``lease`` old; else wait."""
    if state.renewed is not None and now - state.renewed > lease:
        return HoldState(renewed=None, since=now, lapses=state.lapses + 1), "lapsed"
    if heard is not None and heard > state.since and now - heard <= window:
        return replace(state, renewed=now), "renew"
    return state, "wait"


class Hold:
    """Thread-safe. Unarmed (no keeper: local mode, tests) it always holds."""

    def __init__(self) -> None:
        self._state = HoldState()
        self._lease: float | None = None
        self._lock = threading.Lock()

    def mark(self) -> int:
        """A token for :meth:`held`, taken as a run starts."""
        with self._lock:
            return self._state.lapses

    def held(self, mark: int) -> bool:
        """Whether the hold lasted without a lapse since ``mark`` was taken, by the clock now (a lapse the
        keeper has not seen yet counts: the agent may just have woken from a freeze)."""
        with self._lock:
            if self._lease is None:
                return True
            renewed = self._state.renewed  # None: not renewed since the run began (nor has the watchdog a deadline)
            return self._state.lapses == mark and (renewed is None or clock() - renewed <= self._lease)

    def look(self, heard_age: float | None, lease: float, window: float) -> Verdict:
        """One :func:`step` now; ``heard_age``: seconds since the broker was last heard (None: unknown)."""
        with self._lock:
            now = clock()
            heard = None if heard_age is None else now - heard_age
            self._state, verdict = step(self._state, now, heard, lease, window)
            if verdict == "renew":
                self._lease = lease  # armed from the first renewal on
            return verdict


HOLD = Hold()  # the agent's: its keeper renews it, its runs ask it (runner._supervised)


def keep(hold: Hold, heartbeat: float, heard_age: Callable[[], float | None], renew: Callable[[float], None],
         lapsed: Callable[[], None], stop: threading.Event) -> threading.Thread:
    """Start the keeper thread: every ``L/4`` it asks how long ago the broker was last heard, passes each
    renewal on (``renew(L)``: the watchdog's deadline) and calls ``lapsed()`` at a lapse."""
    lease, window = heartbeat / 2, heartbeat * 1.5

    def run() -> None:
        while not stop.wait(lease / 4):
            verdict = hold.look(heard_age(), lease, window)
            if verdict == "renew":
                renew(lease)
            elif verdict == "lapsed":
                _log.error(LAPSED, lease_s=lease, unheard_limit_s=window)
                lapsed()

    thread = threading.Thread(target=run, name="hold-keeper", daemon=True)
    thread.start()
    return thread
