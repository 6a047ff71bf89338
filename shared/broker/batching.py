"""Batch deliveries for handlers that are cheaper per batch (the collector's
database writes): one transaction per batch instead of one per event.

:class:`BatchingHandler` is a per-message :data:`Handler` that buffers
deliveries and hands them to a batch handler on its own flusher thread, once
``max_batch`` are buffered or ``max_wait`` seconds after the first one arrived.
The per-message handler returns at once without settling, so the consumer's
``prefetch`` bounds how many can be buffered: it must be **at least**
``max_batch`` (twice that lets the next batch fill while one is written), or
batches only ever flush on the timer.

Settling: success acks the whole batch; a :class:`RetryableError` requeues it
after a pause (the database is down: every message may succeed later); any
other exception splits the batch in two halves, each handled the same way,
until the message that fails is alone: one that still fails with a
:class:`PermanentError` (undecodable, a value the database refuses) is
dead-lettered, with a log line naming its message id and the reason; one that
fails with anything else (a bug) is requeued once and dead-lettered if it
fails again. So one poison message never blocks or loses its batch-mates, and
finding it in a batch of ``n`` costs about ``2 log2 n`` tries, not ``n``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from spotsweep.shared import log
from spotsweep.shared.broker.port import Delivery, ack_all
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.limits import cap_text

_log = log.get(__name__)

BatchHandler = Callable[[list[Delivery]], None]


class BatchingHandler:
    def __init__(
        self,
        handle_batch: BatchHandler,
        *,
        max_batch: int = 100,
        max_wait: float = 0.05,
        retry_pause: float = 0.5,
        name: str = "batching",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._handle_batch = handle_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._retry_pause = retry_pause
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
        if len(batch) == 1:
            self._process_alone(batch[0])  # nothing to isolate: settle it on its own merits
            return
        try:
            self._handle_batch(batch)
        except RetryableError as e:
            _log.warning("batch_retryable_error", size=len(batch), error=str(e))
            time.sleep(self._retry_pause)
            for d in batch:
                d.nack(requeue=True)
        except Exception as e:
            # Bisect: the half without the poison is stored in one go.
            _log.warning("batch_failed_splitting", size=len(batch), error=cap_text(str(e), 500))
            half = len(batch) // 2
            self._process(batch[:half])
            self._process(batch[half:])
        else:
            ack_all(batch)

    def _process_alone(self, delivery: Delivery) -> None:
        try:
            self._handle_batch([delivery])
        except RetryableError as e:
            _log.warning("message_retryable_error", message_id=delivery.message_id, error=str(e))
            time.sleep(self._retry_pause)
            delivery.nack(requeue=True)
        except PermanentError as e:
            _log.error("message_dead_lettered", message_id=delivery.message_id, routing_key=delivery.routing_key,
                       reason=cap_text(str(e)))
            delivery.nack(requeue=False)
        except Exception:
            # A bug, as the guarded middleware sees it: one more try on a
            # redelivery (it may have been transient), then the dead-letter queue.
            _log.exception("message_failed", message_id=delivery.message_id, redelivered=delivery.redelivered)
            delivery.nack(requeue=not delivery.redelivered)
        else:
            delivery.ack()
