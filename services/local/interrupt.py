"""How local mode stops: the first Ctrl-C (or SIGTERM) drains, the second stops at once.

A drain is the agent's preemption drain, in one process: the agent takes no
more trials, running ones get SIGTERM and the grace to checkpoint (then
SIGKILL), each is reported ``preempted`` (not a failure) and the planner puts
it back as a new attempt; once the planner and the collector have settled
every event (no metric point is dropped with the in-process broker) the
process exits with :attr:`ExitCode.INTERRUPTED` (130). The sweep stays
``running`` in the database and ``spotsweep resume SWEEP`` finishes it.

A second signal kills the trials and exits with :attr:`ExitCode.KILLED`
(137) without waiting; the embedded PostgreSQL stops through its watchdog,
and ``resume`` still continues from the last saved checkpoints. One process
at a time runs a sweep: :func:`sweep_lock` (an ``flock``, released by the
kernel however the holder dies).
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from spotsweep.services.reporter.safe import printable
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.limits import cap_text, is_sweep_id
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

SETTLE_S = 30.0  # at most this long for the planner and the collector to take the last events


class Interrupts:
    """SIGINT/SIGTERM while a local sweep runs: the first sets :attr:`draining`, the second
    calls ``hard_stop`` and exits 137. No exception is raised into the main thread: it
    notices the event where it waits, never half-way through a database call."""

    def __init__(self, hard_stop: Callable[[], None], resume_hint: str) -> None:
        self.draining = threading.Event()
        self._hard_stop = hard_stop
        self._hint = resume_hint
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.draining.is_set():
            self.draining.set()
            return
        # No logging or console here: a handler may interrupt a thread holding their locks.
        os.write(2, f"\nsecond signal: stopping now; trials killed. {self._hint}\n".encode())
        self._hard_stop()
        os._exit(ExitCode.KILLED)

    def __enter__(self) -> Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def wait_settled(broker: MemoryBroker, queues: tuple[str, ...], timeout: float = SETTLE_S) -> bool:
    """Wait until the consumers of ``queues`` have settled everything published to them: nothing waits
    on them and nothing delivered from them is unacked."""
    def settled() -> bool:  # under the server's lock
        held = (q for q in map(broker.server.queues.get, queues) if q is not None)
        return not any(q.heap or any(c.unacked for c in q.consumers) for q in held)

    with broker.server.lock:
        return broker.idle.wait_for(settled, timeout)


@contextmanager
def sweep_lock(home: Path, sweep_id: str) -> Iterator[None]:
    """Hold the sweep's lock while this process runs it; refuse when another does."""
    path = _lock_path(home, sweep_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise PermanentError(f"sweep {sweep_id} is being run by another spotsweep process (pid {holder}): "
                                 "stop it with Ctrl-C first (it drains), or `spotsweep cancel` it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a new holder)


def is_locked(home: Path, sweep_id: str) -> bool:
    """Whether a process holds the sweep's lock now (a local `run` or `resume` of it is going on)."""
    path = _lock_path(home, sweep_id)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _lock_path(home: Path, sweep_id: str) -> Path:
    return home / "runs" / f"{sweep_id}.lock"


def run_here(settings: Settings, sweep_id: str) -> bool:
    """Whether the sweep is local mode's: no ``SPOTSWEEP_DATABASE_URL``, or a `spotsweep run` with this
    ``SPOTSWEEP_HOME`` started it (its lock file stays after it ends; a sweep submitted to a planner has none).
    Its planner is in the process that runs it, which no RabbitMQ message reaches."""
    return settings.database_url is None or (is_sweep_id(sweep_id) and _lock_path(settings.home, sweep_id).exists())


def quoted(sweep_id: str) -> str:
    """A sweep id as an error message shows it: bounded, quoted, escaped."""
    return repr(printable(cap_text(sweep_id, 200)))
