"""Cross-cutting handler concerns as wrappers, not code inside each handler.

``guarded(handler)`` gives every consumer the same policy:

* :class:`RetryableError` (database or broker briefly away): retry in place
  with exponential backoff and full jitter; when the budget is spent, requeue
  the message so another worker (or this one, later) tries again.
* :class:`PermanentError` (an undecodable message, a bad spec): dead-letter it
  and go on. A bad message never kills a service.
* Anything else is a bug: requeue once, and dead-letter on the redelivery, so
  a poison message cannot spin forever.
* Timing and a structlog line per failure, with the message's ids bound.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from spotsweep.shared import log
from spotsweep.shared.broker.port import Delivery, Handler
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.limits import cap_text

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


def guarded(handler: Handler, name: str, backoff: Backoff = Backoff()) -> Handler:
    """Wrap a ``(delivery) -> None`` handler that acks on success itself."""

    def wrapper(delivery: Delivery) -> None:
        started = time.perf_counter()
        h = delivery.headers
        with log.bound(handler=name, message_id=delivery.message_id, sweep_id=h.get("sweep_id"),
                       trial_id=h.get("trial_id"), attempt=h.get("attempt")):
            try:
                retrying(lambda: handler(delivery), backoff, what=name)
            except PermanentError as e:
                _log.error("dead-lettered", reason=cap_text(str(e)))  # bounded: it may quote the body
                delivery.nack(requeue=False)
            except RetryableError as e:
                _log.error("requeued after retries", reason=str(e))
                delivery.nack(requeue=True)
            except Exception:  # a bug: never let it kill the consumer
                _log.exception("handler crashed", redelivered=delivery.redelivered)
                delivery.nack(requeue=not delivery.redelivered)
            finally:
                elapsed = time.perf_counter() - started
                if elapsed > 5:
                    _log.info("slow handler", seconds=round(elapsed, 2))

    return wrapper
