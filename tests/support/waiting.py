"""Waiting in tests: for a condition, for events a consumer collected, for a process to be gone."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def take(events: queue.Queue[Any], kind: type, n: int, timeout: float) -> list[Any]:
    """Up to ``n`` events of ``kind`` from ``events`` (others are dropped), waiting at most ``timeout``."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        try:
            e = events.get(timeout=0.05)
        except queue.Empty:
            continue
        if isinstance(e, kind):
            out.append(e)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie still answers kill(0), but it is dead for our purpose."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # the state follows the command name, which may hold spaces: split after its ")"
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False
