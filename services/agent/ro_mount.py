"""Staged inputs read-only even for a root trial: a mount namespace of the trial's own, each tree bind-mounted
read-only over itself (docs/trial-contract.md, Inputs).

0444 files stop every user but root. A trial the agent runs as root (local mode as root, ``--allow-root-trials``)
gets, before its command is exec'd, a private copy of the node's mounts in which each input tree is a
read-only bind mount: its writes fail with EROFS and nothing outside its namespace changes. It needs
CAP_SYS_ADMIN, which a root agent has (a container's root may not: then the check of
:mod:`.tree_stats` is what protects the next trial). Python 3.11 has no ``os.unshare`` or ``mount``: libc's,
through ctypes, loaded in the agent before the fork, so the child makes only the system calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable, Sequence

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_KEPT = os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC  # equal to MS_NOSUID, MS_NODEV, MS_NOEXEC
_CAP_SYS_ADMIN = 21
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def read_only(trees: Sequence[tuple[str, int]]) -> None:
    """In the calling process (a trial's child before exec): a mount namespace of its own where each of
    ``trees`` (each a path and the mount flags it keeps) is read-only. Raises OSError where the process may not
    make one (no CAP_SYS_ADMIN)."""
    _call(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _call(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")  # nothing leaks out
    for tree, kept in trees:
        path = os.fsencode(tree)
        _call(_libc.mount(path, path, None, MS_BIND | MS_REC, None), f"bind mount {tree}")
        # The mount's nosuid, nodev and noexec kept: a user namespace's root may not drop them (EPERM).
        _call(_libc.mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None), f"remount {tree} read-only")


@functools.cache
def allowed() -> bool:
    """Whether this process may make a mount namespace (CAP_SYS_ADMIN in its effective set, as root has)."""
    try:
        with open("/proc/self/status") as f:
            caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return os.geteuid() == 0
    return bool(caps >> _CAP_SYS_ADMIN & 1)


def preexec(trees: Sequence[str], then: Callable[[], None] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes ``trees`` read-only, then runs ``then`` (the cgroup's joiner); None when
    there is nothing to do. Only for a process that stays root: Popen drops a trial user's privileges before
    its preexec_fn runs, and that user cannot write the trees anyway. A namespace that cannot be made leaves
    the trial as it was (the child cannot log): the check of :mod:`.tree_stats` at the next link still holds."""
    if not trees:
        return then
    kept = [(tree, os.statvfs(tree).f_flag & _KEPT) for tree in dict.fromkeys(trees)]  # read here: the child only mounts

    def run() -> None:
        try:
            read_only(kept)
        except OSError:
            pass
        if then is not None:
            then()
    return run

