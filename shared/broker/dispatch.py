"""The dispatcher: worker threads, draining, and the one settle policy.

Both adapters only deliver, ack and nack; everything between a delivery and
its settle lives here, once. :class:`Workers` run a consumer's handler off the
I/O thread; :func:`settlement` decides (pure) what a failure means: a
:class:`RetryableError` is requeued, a :class:`PermanentError` dead-lettered
with its reason (in the header :data:`REASON_HEADER`, so an operator reads why
from the dead-letter queue itself), anything else is a bug, requeued once and
dead-lettered on the redelivery so a poison message never loops. A handler
acks on success itself (a batching one later, settling through
:func:`settle_failure` too).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

from spotsweep.shared import log
from spotsweep.shared.broker.port import SLOW_HANDLER_S, Delivery, Handler, Outgoing
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.limits import cap_text
from spotsweep.shared.middleware import Backoff, retrying
from spotsweep.shared.topology import DEAD_LETTER_EXCHANGE

_log = log.get("spotsweep.dispatch")

REASON_HEADER = "x-spotsweep-error"  # why a message was dead-lettered
QUEUE_HEADER = "x-spotsweep-queue"  # the queue it was dead-lettered from
REASON_CHARS = 2000  # a reason may quote the body: bounded in the header and the log line
# How long a worker waits before requeueing a delivery whose retries are spent:
# long enough not to spin on a dead dependency, short enough not to stall it.
RETRY_PAUSE_S = 0.5
DEFAULT_RETRY = Backoff()
REFUSED_LOG_S = 60.0  # a consumer logs refused senders at most this often (with a count of the rest)


@dataclass(frozen=True)
class Settle:
    """What to do with a delivery whose handler failed."""

    action: Literal["requeue", "dead_letter"]
    reason: str


def settlement(error: BaseException, redelivered: bool) -> Settle:
    """The one settle policy (pure): requeue what may succeed later, dead-letter what never will."""
    text = cap_text(str(error) or type(error).__name__, REASON_CHARS)
    if isinstance(error, RetryableError):
        return Settle("requeue", text)
    if isinstance(error, PermanentError):
        return Settle("dead_letter", text)
    if not redelivered:
        return Settle("requeue", f"unexpected {type(error).__name__}: {text}")
    return Settle("dead_letter", f"unexpected {type(error).__name__} (failed again on its redelivery): {text}")


def refused_sender(user_id: str | None, accept_users: Collection[str] | None) -> str | None:
    """Why a delivery sent by broker user ``user_id`` may not reach a consumer
    that accepts only ``accept_users``; None when it may (pure)."""
    if accept_users is None or (user_id is not None and user_id in accept_users):
        return None
    sender = "no user_id" if user_id is None else f"user_id {cap_text(repr(user_id), 80)}"
    allowed = ", ".join(repr(u) for u in sorted(accept_users)) or "no one"
    return (f"refused: sent with {sender}, and this consumer accepts messages only from the broker user(s) {allowed} "
            "(SPOTSWEEP_PLANNER_USER for agents); it was not run")


class Throttle:
    """At most one log line per key per ``period`` seconds, counting the lines held back."""

    def __init__(self, period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.period, self._clock = period, clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str) -> int | None:
        """None: hold this line back; else log it, with this many held back since the last."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.period:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)


_refusals = Throttle(REFUSED_LOG_S)


def refuse(delivery: Delivery, reason: str, throttle: Throttle = _refusals) -> None:
    """Dead-letter a delivery from a sender its consumer does not accept, with one
    rate-limited warning line per queue; the handler never sees it."""
    queue = getattr(delivery, "queue", "") or ""
    held = throttle.allow(queue)
    if held is not None:
        _log.warning("refused a message from a sender this consumer does not accept", reason=reason, queue=queue,
                     message_id=delivery.message_id, refused_since_last_line=held)
    dead_letter(delivery, reason)


def dead_letter(delivery: Delivery, reason: str) -> None:
    """Send ``delivery`` to the dead-letter queue with ``reason`` in its headers, then ack it.
    (A plain ``nack(requeue=False)`` cannot carry a reason: it is only the fallback.)"""
    connection = getattr(delivery, "connection", None)
    if connection is not None:
        headers = dict(delivery.headers)
        headers[REASON_HEADER] = reason
        headers[QUEUE_HEADER] = getattr(delivery, "queue", "")
        copy = Outgoing(DEAD_LETTER_EXCHANGE, delivery.routing_key, delivery.body, headers, delivery.message_id,
                        delivery.priority)
        try:
            connection.publish(copy)
        except Exception as e:  # noqa: BLE001 - the broker's own dead-lettering is the fallback
            _log.warning("dead_letter_copy_failed", error=str(e))
        else:
            delivery.ack()
            return
    delivery.nack(requeue=False)


def settle_failure(delivery: Delivery, error: BaseException, retry_pause: float = RETRY_PAUSE_S) -> Settle:
    """Settle a delivery whose handling failed with ``error``, by :func:`settlement`."""
    decision = settlement(error, delivery.redelivered)
    ids = {"message_id": delivery.message_id, "routing_key": delivery.routing_key, "redelivered": delivery.redelivered}
    if decision.action == "dead_letter":
        _log.error("dead-lettered", reason=decision.reason, **ids)
        dead_letter(delivery, decision.reason)
    elif isinstance(error, RetryableError):
        _log.warning("requeued after retries", reason=decision.reason, **ids)
        time.sleep(retry_pause)  # do not spin on a dependency that is away
        delivery.nack(requeue=True)
    else:
        _log.error("handler crashed; requeued once", reason=decision.reason, exc_info=error, **ids)
        delivery.nack(requeue=True)
    return decision


def run_handler(handler: Handler, delivery: Delivery, retry: Backoff = DEFAULT_RETRY,
                retry_pause: float = RETRY_PAUSE_S, accept_users: Collection[str] | None = None,
                slow_after: float | None = SLOW_HANDLER_S) -> None:
    """Run ``handler`` on ``delivery``, retrying in place, then settle by the policy. Never raises.
    A delivery from a sender not in ``accept_users`` is refused (:func:`refuse`) instead.
    A run over ``slow_after`` seconds is logged as slow (None: never; a trial's
    handler lasts as long as its training run, which is not slowness)."""
    started = time.perf_counter()
    outcome = "handled"
    h = delivery.headers
    with log.bound(queue=getattr(delivery, "queue", None), message_id=delivery.message_id, sweep_id=h.get("sweep_id"),
                   trial_id=h.get("trial_id"), attempt=h.get("attempt")):
        reason = refused_sender(getattr(delivery, "user_id", None), accept_users)
        if reason is not None:
            try:
                refuse(delivery, reason)
            except Exception:  # noqa: BLE001 - settling failed (logged by the adapter): keep the worker alive
                _log.exception("settle_failed")
            return
        try:
            retrying(lambda: handler(delivery), retry, what=getattr(delivery, "queue", None) or "handler")
        except Exception as e:  # noqa: BLE001 - every failure is settled by the one policy
            outcome = "failed"
            try:
                outcome = settle_failure(delivery, e, retry_pause).action
            except Exception:  # noqa: BLE001 - settling failed (logged by the adapter): keep the worker alive
                _log.exception("settle_failed")
        finally:
            log_if_slow(handler, time.perf_counter() - started, slow_after, outcome)


def log_if_slow(handler: Handler, elapsed: float, slow_after: float | None, outcome: str) -> None:
    """One warning for a delivery that took over ``slow_after`` seconds (the caller binds the queue and ids)."""
    if slow_after is None or elapsed <= slow_after:
        return
    name = getattr(handler, "__qualname__", None) or type(handler).__name__
    _log.warning(f"slow handler: {name} took {elapsed:.1f} s (over {slow_after:g} s)", handler=name,
                 seconds=round(elapsed, 2), slow_after=slow_after, outcome=outcome)


class Workers:
    """A consumer's worker threads and its buffer of deliveries not yet started."""

    def __init__(self, name: str, handler: Handler, concurrency: int, *, retry: Backoff = DEFAULT_RETRY,
                 finish_buffered: bool = False, on_idle: Callable[[], None] = lambda: None,
                 accept_users: Collection[str] | None = None, slow_after: float | None = SLOW_HANDLER_S) -> None:
        self.finish_buffered = finish_buffered
        self.slow_after = slow_after
        self.accept_users = None if accept_users is None else frozenset(accept_users)
        self._handler = handler
        self._retry = retry
        self._on_idle = on_idle
        self._cond = threading.Condition()
        self.buffer: deque[Delivery] = deque()
        self.running = 0
        self.cancelled = False
        self.threads = [threading.Thread(target=self._work, name=f"worker-{name}-{i}", daemon=True)
                        for i in range(max(1, concurrency))]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def push(self, delivery: Delivery) -> None:
        """A new delivery for the workers (from the adapter's delivering thread)."""
        with self._cond:
            self.buffer.append(delivery)
            self._cond.notify()

    def cancel(self) -> list[Delivery]:
        """No more deliveries: the buffered ones not yet started, for the adapter to requeue
        (none with ``finish_buffered``: the workers run them, then end)."""
        with self._cond:
            self.cancelled = True
            left = [] if self.finish_buffered else list(self.buffer)
            if not self.finish_buffered:
                self.buffer.clear()
            self._cond.notify_all()
        return left

    def release(self) -> None:
        """The connection is gone (the broker requeues what was unacked): let the workers end."""
        with self._cond:
            self.cancelled = True
            self.buffer.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self.buffer and not self.cancelled:
                    self._cond.wait()
                if not self.buffer:
                    return
                delivery = self.buffer.popleft()
                self.running += 1
            try:
                run_handler(self._handler, delivery, self._retry, accept_users=self.accept_users,
                            slow_after=self.slow_after)
            finally:
                with self._cond:
                    self.running -= 1
                self._on_idle()
