"""A trial's processes that left its process group (``setsid``): killed once the trial is over.

The SIGKILL to a trial's process group (:mod:`.signals`) does not reach a
child that called ``setsid`` (a daemonising script, ``setsid sleep 1000 &``),
which used to outlive its trial. So the agent makes itself a *child
subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan anywhere below it
is handed to the agent, not to init. Once a trial is over, :meth:`Reaper.ended`
hands its marks (the agent's token and ``SPOTSWEEP_RUN_ID``, new for every
run, so a redelivery is never taken for it) to one reaper thread per agent,
which looks at the agent's children for :data:`WATCH_S` (one reading of the
machine's processes per look, off the trial's path): a child the agent did
not start that is alive and carries a run's marks is SIGKILLed with the
group it leads; a dead one is reaped when it was a member of a trial's
group, seen alive with the agent's token, or killed here (never one of the
agent's own ``Popen`` children, whose status their owner reads).

It cannot find a process that clears its environment and leaves its group;
without ``prctl`` (not Linux) orphans go to init. Only the agent service
turns it on (``RunnerConfig.reap_orphans``): a test runner calling
:func:`~.runner.run_trial` in-process must not inherit a subreaper.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from contextlib import suppress

from spotsweep.services.agent.signals import killpg
from spotsweep.shared import log

_log = log.get("spotsweep.agent")
PR_SET_CHILD_SUBREAPER = 36
LOOK_S = 0.25  # between two looks at the agent's children
WATCH_S = 2.0  # how long after a trial's end its orphans are looked for
_RECENT_GROUPS = 4096  # trial groups whose dead members are reaped


class Reaper:
    """The agent's side; see the module's docstring."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._mains: set[int] = set()  # trial processes the agent started and reaps itself
        self._groups: dict[int, None] = {}  # recent trials' process groups (ordered, bounded)
        self._pending: list[tuple[frozenset[bytes], float]] = []  # (marks, until) of ended runs
        self._seen: set[int] = set()  # orphans seen alive with the agent's token
        self._thread: threading.Thread | None = None
        self.adopted = False
        self.killed: list[int] = []  # what this reaper killed (for the log and tests)

    def adopt(self) -> bool:
        """Become the child subreaper of this process (once); False where the kernel says no."""
        if not self.adopted:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                self.adopted = int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
            except (OSError, AttributeError):
                self.adopted = False
        return self.adopted

    def started(self, pid: int) -> None:
        """Trial ``pid`` has started (its own process group). Until :meth:`ended` it is never
        reaped here; its group's dead members are (a trial's pid enters both sets at once, so a
        trial that exits before this call is not reaped either: its group is not known yet)."""
        with self._lock:
            self._mains.add(pid)
            self._groups[pid] = None
            while len(self._groups) > _RECENT_GROUPS:
                del self._groups[next(iter(self._groups))]

    def ended(self, pid: int, marks: frozenset[bytes]) -> None:
        """Trial ``pid`` has been reaped: kill what is left of it that carries ``marks``."""
        with self._lock:
            self._mains.discard(pid)
            if not self.adopted:
                return
            self._pending.append((marks, time.monotonic() + WATCH_S))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="orphan-reaper", daemon=True)
                self._thread.start()
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    self._lock.wait()
            self.look()
            time.sleep(LOOK_S)
            with self._lock:
                now = time.monotonic()
                self._pending = [(m, until) for m, until in self._pending if until > now]

    def look(self) -> None:
        """One look at the agent's children: kill the marked, reap the dead that are ours to reap."""
        with self._lock:
            marks = [m for m, _ in self._pending]
            mains, groups = set(self._mains), set(self._groups)
        for pid, state, pgrp in _children(os.getpid()):
            if pid in mains:
                continue
            if state in ("Z", "X"):
                if pgrp in groups or pid in self._seen or pid in self.killed:
                    with suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)
                    self._seen.discard(pid)
                continue
            env = _environ(pid)
            if env is None:
                continue
            if any(m <= env for m in marks):
                if pgrp == pid:
                    killpg(pid)
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                self.killed = [*self.killed[-999:], pid]
                _log.warning("a process the trial left outside its process group (setsid) was killed", pid=pid)
            elif any(e.startswith(b"SPOTSWEEP_AGENT_TOKEN=") for e in env):
                self._seen.add(pid)


def marks(env: dict[bytes, bytes], *names: bytes) -> frozenset[bytes]:
    """The ``NAME=value`` entries of ``env`` that name one run."""
    return frozenset(name + b"=" + env[name] for name in names if name in env)


def _children(parent: int) -> list[tuple[int, str, int]]:
    """(pid, state, process group) of every process whose parent is ``parent``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            out.append((int(name), fields[0].decode(), int(fields[2])))
    return out


def _environ(pid: int) -> set[bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return set(f.read().split(b"\0"))
    except OSError:
        return None

