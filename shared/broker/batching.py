"""Batch deliveries for handlers that are cheaper per batch (the collector's
database writes): one transaction per batch instead of one per event.

:class:`BatchingHandler` is a per-message :data:`Handler` that buffers
deliveries and hands them to a batch handler on its own flusher thread, once
``max_batch`` are buffered or ``max_wait`` seconds after the first one arrived.
The per-message handler returns at once without settling, so the consumer's
``prefetch`` bounds how many can be buffered: it must be **at least**
``max_batch`` (twice that lets the next batch fill while one is written), or
batches only ever flush on the timer.

Settling is the dispatcher's one policy (:func:`~.dispatch.settle_failure`),
applied to a batch: success acks the whole batch; a :class:`RetryableError`
(after ``retry``'s in-place tries; none by default) requeues every message of
it after a pause (the database is down: every message may succeed later); any
other exception splits the batch in two halves, each handled the same way,
until the message that fails is alone and is settled by the policy: a
:class:`PermanentError` (undecodable, a value the database refuses) is
dead-lettered with the reason in its headers; anything else (a bug) is
requeued once and dead-lettered if it fails again. So one poison message
never blocks or loses its batch-mates, and finding it in a batch of ``n``
costs about ``2 log2 n`` tries, not ``n``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from spotsweep.shared import log
from spotsweep.shared.broker.dispatch import RETRY_PAUSE_S, settle_failure
from spotsweep.shared.broker.port import Delivery, ack_all
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.limits import cap_text
from spotsweep.shared.middleware import Backoff, retrying

_log = log.get(__name__)

BatchHandler = Callable[[list[Delivery]], None]
NO_RETRY = Backoff(attempts=1)  # a batch is requeued at once: its messages come back in later batches


class BatchingHandler:
    def __init__(self, handle_batch: BatchHandler, *, max_batch: int = 100, max_wait: float = 0.05,
                 retry_pause: float = RETRY_PAUSE_S, retry: Backoff = NO_RETRY, name: str = "batching") -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._handle_batch = handle_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._retry_pause = retry_pause
        self._retry = retry
        self._cond = threading.Condition()
        self._buffer: list[Delivery] = []
        self._first_at = 0.0  # monotonic time the oldest buffered delivery arrived
        self._closed = False
        self._flusher = threading.Thread(target=self._run, name=f"{name}-flusher", daemon=True)
        self._flusher.start()

    def __call__(self, delivery: Delivery) -> None:
        """The per-message handler to pass to ``Broker.consume``."""
        with self._cond:
            if self._closed:
                delivery.nack(requeue=True)  # nobody will flush it any more
                return
            self._buffer.append(delivery)
            if len(self._buffer) == 1:
                self._first_at = time.monotonic()
                self._cond.notify()  # the flusher starts the max_wait clock
            elif len(self._buffer) >= self.max_batch:
                self._cond.notify()

    def close(self) -> None:
        """Flush what is buffered, then end the flusher thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._flusher is not threading.current_thread():
            self._flusher.join()

    def _next_batch(self) -> list[Delivery] | None:
        """Block until a batch is due; None once closed and empty."""
        with self._cond:
            while True:
                if self._buffer:
                    wait = self._first_at + self.max_wait - time.monotonic()
                    if len(self._buffer) >= self.max_batch or wait <= 0 or self._closed:
                        batch, self._buffer = self._buffer[: self.max_batch], self._buffer[self.max_batch :]
                        self._first_at = time.monotonic()  # the rest waits at most max_wait more
                        return batch
                    self._cond.wait(wait)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._process(batch)
            except Exception:  # settling failed (logged by the adapter); keep the flusher alive
                _log.exception("batch_settle_failed", size=len(batch))

    def _process(self, batch: list[Delivery]) -> None:
        try:
            retrying(lambda: self._handle_batch(batch), self._retry, what="batch")
        except Exception as e:
            if len(batch) == 1:
                settle_failure(batch[0], e, self._retry_pause)
            elif isinstance(e, RetryableError):
                # The policy's retryable branch for the whole batch: one log line, one pause.
                _log.warning("batch requeued after retries", size=len(batch), reason=cap_text(str(e), 500))
                time.sleep(self._retry_pause)
                for d in batch:
                    d.nack(requeue=True)
            else:  # bisect: the half without the poison is stored in one go
                _log.warning("batch_failed_splitting", size=len(batch), error=cap_text(str(e), 500))
                self._process(batch[:len(batch) // 2])
                self._process(batch[len(batch) // 2:])
        else:
            ack_all(batch)
