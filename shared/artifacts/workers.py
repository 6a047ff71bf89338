"""A batch of transfer jobs run by a few daemon threads, which the caller can abandon, and the descriptors they read.

Checkpoint uploads and restores are many small requests (a part, a file) whose
latency, not bandwidth, sets the pace on a remote object store: they run
``workers`` at a time. Jobs may add jobs (a large file's parts once its
multipart upload exists). :meth:`Batch.wait` returns when every job is done,
raises the first job's error at once, or raises :class:`TransferCancelled`
as soon as ``cancel()`` says so (a draining node out of grace).

Hand-written rather than a ``ThreadPoolExecutor``: the executor's threads are
joined when the interpreter exits, so one request hung on a dead object store
would hold a draining agent's exit for minutes. These threads are daemons: an
abandoned batch costs nothing once the caller has moved on.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable

from spotsweep.shared.errors import PermanentError

WORKERS = 16  # requests in flight per transfer (boto3's transfer manager: 10)
_POLL = 0.05  # seconds between looks at ``cancel`` while waiting


class TransferCancelled(PermanentError):
    """The transfer was abandoned (the node is going away): nothing it started was committed."""


class Batch:
    """Jobs run by ``workers`` daemon threads; see the module's docstring."""

    def __init__(self, workers: int = WORKERS, cancel: Callable[[], bool] | None = None, name: str = "transfer") -> None:
        self._cancel = cancel or (lambda: False)
        self._cond = threading.Condition()
        self._jobs: deque[Callable[[], None]] = deque()
        self._pending = 0  # jobs added and not finished
        self._running = 0  # jobs a thread is running now
        self._error: BaseException | None = None
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def add(self, job: Callable[[], None]) -> None:
        """Queue ``job``; ignored once the batch failed or was abandoned."""
        with self._cond:
            if self._stopped:
                return
            self._jobs.append(job)
            self._pending += 1
            self._cond.notify()

    def failed(self) -> bool:
        """Whether a job failed or the batch was abandoned (long jobs look, to stop early)."""
        return self._stopped

    def room(self, limit: int) -> None:
        """Block until fewer than ``limit`` jobs are pending (a producer's back-pressure:
        each queued file holds an open descriptor); raises as :meth:`wait` would."""
        self._wait_until(lambda: self._pending < limit)

    def wait(self) -> None:
        """Until every job is done; the first error (or :class:`TransferCancelled`) at once. Stops the threads."""
        try:
            self._wait_until(lambda: self._pending == 0)
        finally:
            self._stop()

    def settle(self) -> None:
        """After a failure, until no job is running any more (queued ones are dropped): what a
        caller needs before it removes the files jobs write (a restore's staging folder)."""
        self._stop()
        with self._cond:
            while self._running:
                self._cond.wait(_POLL)

    def _wait_until(self, ready: Callable[[], bool]) -> None:
        with self._cond:
            while True:
                if self._error is not None:
                    self._stopped = True
                    raise self._error
                if self._cancel():
                    self._stopped = True
                    self._cond.notify_all()
                    raise TransferCancelled("the transfer was abandoned: the node is going away")
                if ready():
                    return
                self._cond.wait(_POLL)

    def _stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._jobs.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                job = self._jobs.popleft()
                self._running += 1
            try:
                if not self._cancel():
                    job()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller, who raises it
                with self._cond:
                    if self._error is None:
                        self._error = e
                    self._stopped = True
            finally:
                with self._cond:
                    self._pending -= 1
                    self._running -= 1
                    self._cond.notify_all()


class Fds:
    """Descriptors a transfer opened, each closed once: by its last job, or all at once when
    the transfer fails (a job abandoned in flight that closes later finds its number gone, never
    closing a descriptor the process reopened under that number meanwhile)."""

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._lock = threading.Lock()

    def add(self, fd: int) -> int:
        with self._lock:
            self._open.add(fd)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            if fd not in self._open:
                return
            self._open.discard(fd)
        os.close(fd)

    def close_all(self) -> None:
        with self._lock:
            fds, self._open = self._open, set()
        for fd in fds:
            os.close(fd)
