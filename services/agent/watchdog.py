"""Trials die with their agent: a watchdog process kills them when the agent is gone.

If the agent is killed outright (the OOM killer, kill -9 of the agent alone)
while its trials run on, the broker hands those trials to another node and
each would run twice, unsupervised here. The watchdog prevents that.

Why not ``PR_SET_PDEATHSIG`` (``setpriv --pdeathsig KILL`` before each
trial's command, as earlier versions did): it costs a second exec per trial
(~0.9 ms of CPU, most of what a short trial costs the agent), and it reaches
only the trial's first process, so a script's own children (torchrun ranks,
data-loader workers) ran on. The watchdog kills whole process groups.

How: one small process per agent (``python -m
spotsweep.services.agent.watchdog``), in its own session so that a kill of
the agent's process group does not take it along, reads lines from a pipe
whose write end only the agent holds: ``+PGID`` when a trial's group starts,
``-PGID`` once it has been reaped. When the pipe reaches end of file (the
agent exited, however it died: the kernel closes its descriptors) it
SIGKILLs every group still registered, and also every process that
carries the agent's token in its environment (found with psutil; a trial started in the
instant before its ``+PGID`` was written, or a child that left its group),
then exits.

The agent's hold (:mod:`.hold`) renews its lease here with ``*SECONDS``
lines: once armed, a lease that runs out without a renewal (the agent frozen
by SIGSTOP, its broker unheard) SIGKILLs every registered group and token
carrier (a container's processes carry it too), as the end of file would,
and the watchdog waits for the next renewal. It looks at a
clock that counts a suspend (CLOCK_BOOTTIME) at least every ``LOOK_S``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from contextlib import suppress

import psutil

from spotsweep.services.agent.hold import clock
from spotsweep.services.agent.signals import killpg

TOKEN_VAR = "SPOTSWEEP_AGENT_TOKEN"
LOOK_S = 0.25  # the watchdog's longest sleep while a lease is armed


class Watchdog:
    """The agent's side: starts the watchdog process on first use, and again if it died."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._groups: set[int] = set()

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}\n", lambda: self._groups.add(pgid))

    def discard(self, pgid: int) -> None:
        self._send(f"-{pgid}\n", lambda: self._groups.discard(pgid))

    def renew(self, lease: float) -> None:
        """The agent holds its attempts for ``lease`` more seconds: past that, the watchdog kills them."""
        self._send(f"*{lease:.3f}\n", lambda: None)

    def groups(self) -> list[int]:
        """The process groups of the trials running now."""
        with self._lock:
            return list(self._groups)

    def close(self) -> None:
        """End the watchdog (its registered groups are killed): the agent is exiting."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait()

    def _send(self, line: str, note: Callable[[], None]) -> None:
        with self._lock:
            note()
            for _ in range(2):
                proc = self._ensure()
                try:
                    assert proc.stdin is not None
                    # One write to the pipe, no poll: a dead watchdog's pipe has
                    # no reader, so the write itself says so (EPIPE).
                    os.write(proc.stdin.fileno(), line.encode())
                    return
                except (BrokenPipeError, ValueError):  # it died (or was closed): start another
                    proc.poll()  # reap it
                    self._proc = None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "spotsweep.services.agent.watchdog", self.token], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, start_new_session=True,
            )
            assert self._proc.stdin is not None
            # A new watchdog knows nothing yet: tell it every live group.
            self._proc.stdin.write("".join(f"+{g}\n" for g in self._groups).encode())
            self._proc.stdin.flush()
        return self._proc


def _carriers(token: str) -> list[int]:
    """Processes whose environment holds ``token`` (those of our own user: psutil
    cannot read another user's environment, and they are not ours to kill)."""
    found = []
    for proc in psutil.process_iter():
        with suppress(psutil.Error, OSError):  # gone, a zombie, or not ours
            if proc.environ().get(TOKEN_VAR) == token:
                found.append(proc.pid)
    return found


def _read(fd: int, deadline: float | None) -> bytes | None:
    """What the pipe has by the deadline (b"" at end of file), or None when the deadline came first."""
    while deadline is None or clock() < deadline:
        wait = None if deadline is None else min(LOOK_S, max(0.0, deadline - clock()))
        if select.select([fd], [], [], wait)[0]:
            return os.read(fd, 65536)
    return None


def _kill(groups: set[int], token: str) -> None:
    """Every registered group, then every process carrying the token (a container's, one that left its group)."""
    for pgid in groups:
        killpg(pgid)
    groups.clear()
    spare = {os.getpid(), os.getppid()}  # never the agent: a lapse kills its trials only
    for pid in _carriers(token):
        if pid not in spare:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def serve(token: str) -> None:
    """Read ``+PGID``/``-PGID``/``*LEASE`` lines until end of file, then kill what is left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the agent: the agent cleans up itself
    groups: set[int] = set()
    deadline: float | None = None  # when the agent's lease runs out; None: not armed
    fd, rest = sys.stdin.fileno(), b""
    while (chunk := _read(fd, deadline)) != b"":
        if chunk is None:  # the lease ran out: the agent is frozen or cut off, and the broker will redeliver
            _kill(groups, token)
            deadline = None
            continue
        *lines, rest = (rest + chunk).split(b"\n")
        for line in (raw.strip() for raw in lines):
            if line[:1] in (b"+", b"-") and line[1:].isdigit():
                (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
            elif line[:1] == b"*":
                with suppress(ValueError):
                    deadline = clock() + float(line[1:])
    _kill(groups, token)


if __name__ == "__main__":
    serve(sys.argv[1])
