"""Waiting for events a test's consumer collected in a queue."""

from __future__ import annotations

import queue
import time
from typing import Any


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
