"""A memory cgroup per trial: the kernel keeps a trial within ``resources.memory``.

The agent makes each run's cgroup below its own (cgroup v1's memory
controller, or v2 where the node has the unified hierarchy with ``memory``
delegated to the agent's cgroup), sets the limit, and puts the trial's first
process in it before it runs anything (from ``Popen``'s ``preexec_fn``, and
again from the agent once it started, for a node where the trial's user may
not write the file): every process it forks is in it too. Over the limit the
kernel's OOM killer kills a process of that cgroup only, never a neighbour or
the agent; :meth:`TrialCgroup.oom_killed` tells the runner it happened. Where
no cgroup can be made (no controller, no permission), :func:`find` returns
None and the agent's resource monitor enforces the limit instead
(:mod:`.monitor`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from spotsweep.shared import log

_log = log.get("spotsweep.agent")
ROOT = Path("/sys/fs/cgroup")
PREFIX = "spotsweep-"


@dataclass(frozen=True)
class Hierarchy:
    """The agent's own memory cgroup: its directory and the cgroup version."""

    path: Path
    version: int

    def own_limit(self) -> int | None:
        """The memory limit of the agent's own cgroup (a pod's, a container's); None: unlimited."""
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        try:
            text = (self.path / name).read_text().strip()
        except OSError:
            return None
        return None if text == "max" or int(text) >= 2**62 else int(text)

    def make(self, run_id: str, limit: int, uid: int | None = None) -> TrialCgroup | None:
        """A new cgroup limited to ``limit`` bytes for run ``run_id``; None (logged) when the node refuses."""
        path = self.path / f"{PREFIX}{run_id}"
        try:
            path.mkdir()
            if self.version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limit))
                with suppress(OSError):  # no swap accounting: then swap is not limited
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            else:
                (path / "memory.max").write_text(str(limit))
                with suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
            if uid is not None:  # the trial's user moves its own first process in (preexec_fn runs as it)
                with suppress(OSError):
                    os.chown(path / "cgroup.procs", uid, -1)
        except OSError as e:
            _log.warning(f"cannot make a memory cgroup for the trial ({e}); the resource monitor enforces its memory")
            with suppress(OSError):
                path.rmdir()
            return None
        return TrialCgroup(path, self.version)

    def remove_stale(self) -> None:
        """Remove empty trial cgroups that an agent killed outright left behind."""
        for path in self.path.glob(f"{PREFIX}*"):
            with suppress(OSError):
                path.rmdir()


@dataclass(frozen=True)
class TrialCgroup:
    """One run's memory cgroup."""

    path: Path
    version: int

    def joiner(self) -> Callable[[], None]:
        """For ``Popen(preexec_fn=...)``: the new process enters the cgroup before it execs
        (async-signal-safe enough: an open, a write, a close; a failure is left to :meth:`join`)."""
        procs = os.fsencode(self.path / "cgroup.procs")

        def join() -> None:
            with suppress(OSError):
                fd = os.open(procs, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)

        return join

    def join(self, pid: int) -> None:
        """Move ``pid`` in from the agent (a no-op when it is there already)."""
        with suppress(OSError):
            (self.path / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer killed a process of this cgroup (it went over its limit)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            fields = dict(line.split() for line in (self.path / name).read_text().splitlines() if line.strip())
        except (OSError, ValueError):
            return False
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Delete the cgroup once its processes are gone (one left, killed by the reaper soon, keeps it until
        :meth:`Hierarchy.remove_stale` at the next start)."""
        with suppress(OSError):
            self.path.rmdir()


def find(root: Path = ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> Hierarchy | None:
    """The agent's own memory cgroup where it may make children in it; None where it may not."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:  # v1: "4:memory:/path"
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return _usable(Hierarchy(root / "memory" / path.lstrip("/"), 1))
    for line in lines:  # v2: "0::/path", with memory among the controllers given to children
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (root / "cgroup.controllers").exists():
            own = root / path.lstrip("/")
            with suppress(OSError):
                if "memory" not in (own / "cgroup.subtree_control").read_text().split():
                    (own / "cgroup.subtree_control").write_text("+memory")
            return _usable(Hierarchy(own, 2))
    return None


def _usable(hierarchy: Hierarchy) -> Hierarchy | None:
    """``hierarchy`` when a child cgroup with a memory limit can be made in it, else None."""
    probe = hierarchy.make(f"probe-{os.getpid()}", 2**40)
    if probe is None:
        return None
    probe.remove()
    return hierarchy


__all__ = ["Hierarchy", "TrialCgroup", "find"]
