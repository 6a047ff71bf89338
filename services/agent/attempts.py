"""The attempts this agent runs or ran, so that a second copy of one is dropped, not run.

A trial message is ``trial_id#attempt``; the broker may hand the same one
out twice: the planner republishes what a broker that lost its data forgot
(services/planner/reconcile.py), and when in doubt a copy of one the queue
still held. The planner fences a second run off (it stops a second run of a
live attempt, and any run of an ended one), but only after that run started
its process. An agent that gets a copy of an attempt it is running, or ran
to its end, drops it before anything starts.

Only ends that counted are remembered: a run whose delivery was lost (the
connection dropped), or whose final event was not confirmed, is forgotten,
since its attempt comes back to be run again (redelivered). A run counts as
running only while its connection lasts: the redelivery of a run lost with
its connection may arrive on the next one before the old run has stopped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

Key = tuple[str, int]  # (trial_id, attempt)
REMEMBERED = 10_000  # ended attempts kept; the oldest are forgotten first


class Attempts:
    """Thread-safe: one per agent, across connections."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._running: dict[Key, threading.Event] = {}  # the run's connection's "lost" event
        self._ended: OrderedDict[Key, None] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def claim(self, key: Key, lost: threading.Event) -> str | None:
        """Start running attempt ``key`` on the connection whose end sets ``lost``: None if this
        agent may, else why not ("running" or "ended")."""
        with self._lock:
            holder = self._running.get(key)
            if holder is not None and not holder.is_set():
                return "running"
            if key in self._ended:
                return "ended"
            self._running[key] = lost
            return None

    def ended(self, key: Key, lost: threading.Event) -> None:
        """The attempt's run ended and its end counted (its final event confirmed, or the planner stopped it)."""
        with self._lock:
            if self._running.get(key) is lost:
                del self._running[key]
            self._ended[key] = None
            while len(self._ended) > self._remembered:
                self._ended.popitem(last=False)

    def release(self, key: Key, lost: threading.Event) -> None:
        """The run did not end for good (lost, or not reported): a copy may run again."""
        with self._lock:
            if self._running.get(key) is lost:
                del self._running[key]
            self._ended.pop(key, None)
