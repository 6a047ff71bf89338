"""Retrying with backoff, the one way spotsweep retries a call that may succeed later.

:func:`retrying` retries a call that raises :class:`RetryableError` with
exponential backoff and full jitter. The dispatcher
(:mod:`spotsweep.shared.broker.dispatch`) runs every handler under it and
settles what still fails by the one settle policy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from spotsweep.shared import log
from spotsweep.shared.errors import RetryableError

_log = log.get("spotsweep.middleware")
# One jitter source for the process: seeding a Random from the OS on every call
# cost more than most calls it wraps (it wraps every handler and S3 call).
_JITTER = random.Random()


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter (AWS architecture blog's variant)."""

    base: float = 0.2
    cap: float = 10.0
    attempts: int = 8

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap, self.base * 2**attempt))


def retrying(fn: Callable[[], object], backoff: Backoff = Backoff(), rng: random.Random | None = None, what: str = "call") -> object:
    """Call ``fn`` until it does not raise :class:`RetryableError` or the budget is spent."""
    rng = rng or _JITTER
    for attempt in range(backoff.attempts):
        try:
            return fn()
        except RetryableError as e:
            if attempt == backoff.attempts - 1:
                raise
            pause = backoff.delay(attempt, rng)
            _log.warning("retrying", what=what, error=str(e), attempt=attempt + 1, pause_s=round(pause, 2))
            time.sleep(pause)
    raise AssertionError("unreachable")

