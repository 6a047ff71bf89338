"""Per-sweep privacy on a node: each staged input tree (and setup.pip env) behind a gate only its own trials pass.

Staged inputs are content-addressed and shared by every trial on the node
that names the same content (:mod:`.inputs`), so a group per sweep would not
fit: a tree belongs to whichever sweeps staged it. So each tree is a gate of
its own. Its top folder is ``root:<gid> 0750``, the gid the tree's alone on
this node (:func:`gate_gid`), and the cache above it is ``0711`` (entered, not
listed); the files below stay 0444/0555, out of reach unless the gate is
passed. A trial starts with the gids of the trees its own links point to as
its only supplementary groups (:func:`groups`: ``Popen(extra_groups=)``,
``docker run --group-add``), so it reads its own inputs and, even given
another tree's path, nothing else: not another sweep's, not an earlier
trial's of the same user. The gids are numbers only (no ``/etc/group``
entry: ``setgroups`` and ``chown`` take any), from a range no system or
container tool hands out (:data:`BASE`), never one a group of the node has.
``setup.pip`` envs (:mod:`.pyenv`) are gated the same way, from a lane of
gids of their own (:data:`ENVS`), so an env never shares a gid with an input
tree of the other cache.

Only an agent running as root gates (only root can ``chown`` to a group it is
not in, and only with ``--trial-user`` do trials run as someone else); without
root every trial runs as the agent's user, and the trees stay 0555.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import grp
import hashlib
import os
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from spotsweep.shared import log

_log = log.get("spotsweep.agent")

# systemd's users and groups document leaves 1879048192-2147352575 unused (past the container ranges,
# below the "foreign" one); 2**24 gids from its start.
BASE = 1_879_048_192
SPAN = 1 << 24
INPUTS, ENVS = BASE, BASE + SPAN  # each cache's lane of SPAN gids: the two caches never hand out the same gid
_LOCK = ".gates.lock"  # one allocation at a time per cache, across the node's agents


def is_gate(gid: int) -> bool:
    """Whether ``gid`` is in the gates' range (so a tree's group a trial may be given)."""
    return BASE <= gid < BASE + 2 * SPAN


def gate_gid(name: str, taken: Collection[int], lane: int = INPUTS) -> int:
    """The gid for tree ``name``: its hash's place in the ``lane`` (its first gid), else the next one not ``taken``."""
    start = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % SPAN
    for i in range(SPAN):
        gid = lane + (start + i) % SPAN
        if gid not in taken:
            return gid
    raise OSError("no free gate gid")  # 16 million trees on one node


def gated() -> bool:
    """Whether this agent gates its trees (it runs as root)."""
    return os.geteuid() == 0


def place(cache: Path, staging: Path, tree: Path, lane: int = INPUTS) -> None:
    """Rename the staged ``staging`` into place at ``tree``, behind a gate of its own when this agent gates."""
    if not gated():
        os.rename(staging, tree)
        return
    with _allocating(cache) as taken:
        _close(staging, gate_gid(tree.name, taken, lane))
        os.rename(staging, tree)


def ensure(cache: Path, tree: Path, lane: int = INPUTS) -> None:
    """Gate ``tree`` if it is not yet (staged or built by an agent before gates, or without root then)."""
    if not gated() or is_gate(os.stat(tree).st_gid):
        return
    with _allocating(cache) as taken:
        if not is_gate(os.stat(tree).st_gid):
            _close(tree, gate_gid(tree.name, taken, lane))


def groups(links: Iterable[Path]) -> tuple[int, ...]:
    """The gate gids of the trees ``links`` (a trial's input links, as the agent made them) point to, in order."""
    found = []
    for link in links:
        try:
            gid = os.stat(os.path.realpath(link)).st_gid
        except OSError:
            continue
        if is_gate(gid) and gid not in found:
            found.append(gid)
    return tuple(found)


def _close(folder: Path, gid: int) -> None:
    """Make ``folder`` the gate ``gid``; where the kernel refuses that gid (a user namespace that does not map it),
    the folder stays as it was (an input tree 0555, readable by every trial) and the agent says so."""
    try:
        os.chown(folder, 0, gid, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EPERM):
            raise
        _ungated(e.strerror or str(e))
        return
    os.chmod(folder, 0o750)


@functools.cache
def _ungated(error: str) -> None:
    """Said once per agent: every trial on this node can read every staged tree."""
    _log.warning("insecure setup: staged inputs and setup.pip envs are not gated, every trial on this node can read "
                 "them: this agent cannot give a tree a gid of its own (root in a user namespace that does not map "
                 "it?)", error=error)


@contextmanager
def _allocating(cache: Path) -> Iterator[set[int]]:
    """Hold the cache's gate lock; yield the gids taken: every gate in the cache and the node's groups in range."""
    fd = os.open(cache / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        taken = {g.gr_gid for g in grp.getgrall() if is_gate(g.gr_gid)}
        for entry in os.scandir(cache):
            with suppress(OSError):  # gone meanwhile
                if entry.is_dir(follow_symlinks=False) and is_gate(gid := entry.stat(follow_symlinks=False).st_gid):
                    taken.add(gid)
        yield taken
    finally:
        os.close(fd)
