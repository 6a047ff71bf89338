"""The embedded PostgreSQL dies with its last user: a watchdog process per user stops it.

pgserver starts the server with ``pg_ctl start``, so the postmaster is no
child of ours: it runs on after its starter dies. pgserver stops it at
``atexit`` when the last process in the data directory's handle list
(``.handle_pids.json``) exits, but a process killed outright (kill -9, the
OOM killer) runs no ``atexit``: the server is left running, and its pid stays
in the list, so no later user would stop it either.

Why not ``PR_SET_PDEATHSIG``: the postmaster's parent is ``pg_ctl``, which
exits as soon as the server is up; the signal would stop it at once.

How: every process that opens the embedded database starts one small
process (``python -m spotsweep.shared.db.pg_watchdog DATA_DIR PID``) in its
own session (a Ctrl-C or a kill of the owner's process group does not reach
it), reading a pipe whose write end only the owner holds. At end of file
(the owner exited, however it died: the kernel closes its descriptors) it
takes pgserver's lock, removes the owner and every dead process from the
handle list, and when no live user is left stops the server with
``pg_ctl stop -m fast`` (open sessions are ended, committed work is kept).
A normal exit has already stopped it (pgserver's ``atexit``): then there is
nothing left to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

HANDLES = ".handle_pids.json"  # pgserver's list of the processes using a data directory
_held = threading.Lock()
_fd: list[int] = []  # the lock file, opened once and never closed


@contextmanager
def locked() -> Iterator[None]:
    """The lock pgserver's own start and cleanup take around the handle list and pg_ctl:
    fasteners' ``fcntl.lockf`` on its public ``PostgresServer.lock_path``. Another process's
    pgserver excludes us only through that very lock (a ``flock`` would not conflict with a
    ``lockf`` on Linux). POSIX record locks belong to the process, not the thread: a thread
    lock orders this process's users, and the file stays open (closing any descriptor of it
    would drop every lock this process holds on it)."""
    from pgserver import PostgresServer  # deferred: 90 ms for the embedded database alone (embedded.py imports us)

    with _held:
        if not _fd:
            path = Path(PostgresServer.lock_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            _fd.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
        fcntl.lockf(_fd[0], fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(_fd[0], fcntl.LOCK_UN)


def start(data_dir: Path) -> int:
    """Start the watchdog of this process's use of ``data_dir``; returns the pipe's write
    end, which the caller keeps open for as long as it lives (never inherited by children)."""
    read_end, write_end = os.pipe()
    try:
        subprocess.Popen([sys.executable, "-m", __name__, str(data_dir), str(os.getpid())], stdin=read_end,
                         stdout=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    return write_end


def live(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    import psutil  # deferred: only where the embedded database runs (pgserver loads it there anyway)

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def prune(data_dir: Path, gone: int | None = None) -> list[int]:
    """Drop ``gone`` and every dead process from the handle list; return the live ones.
    The caller holds :func:`locked`."""
    path = data_dir / HANDLES
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []
    kept = [p for p in pids if p != gone and live(p)]
    if kept != pids:
        path.write_text(json.dumps(kept))
    return kept


def stop_if_unused(data_dir: Path, owner: int) -> bool:
    """After ``owner`` exited: stop the server unless another live process uses it. True if stopped."""
    from pgserver import postgres_server as pgs, utils as pg_utils  # deferred, as in locked()

    with locked():
        if prune(data_dir, owner):
            return False
        info = pg_utils.PostmasterInfo.read_from_pgdata(data_dir)
        if info is None or not info.is_running():
            return False  # the owner's atexit stopped it, or it never started
        user = "pgserver" if os.geteuid() == 0 else None  # pgserver runs the server as this user under root
        try:
            pgs.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user, timeout=60)
        except (subprocess.SubprocessError, OSError):
            if info.process is not None:
                with contextlib.suppress(psutil.NoSuchProcess):  # it may have stopped meanwhile: nothing to do then
                    info.process.terminate()  # SIGTERM to the postmaster is a smart shutdown; better than none
        return True


def serve(data_dir: Path, owner: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the owner: it stops the server itself
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal closing: the owner's end says when
    while os.read(0, 4096):
        pass
    stop_if_unused(data_dir, owner)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    serve(Path(sys.argv[1]), int(sys.argv[2]))
