"""A slot's scratch folder, kept from one trial to the next.

Each run needs an empty working directory, an empty checkpoint directory and
three files (metrics, stdout, stderr). Making that tree with ``mkdtemp`` and
removing it with ``rmtree`` for every trial cost the agent more CPU than
anything else it did per trial (0.5-0.7 ms on ext4, measured with perf
during ``bench/dispatch_cpu.py``: inodes allocated and freed, directories
above all, which ext4 makes slower the more recently it freed some). A
slot's trials run one after another, so its tree is made once, and between
trials only what must be new is made again.

The trial's process group is killed when its main process exits (see
:mod:`.runner`), but a process that left the group (``setsid``: a daemon a
script started) may live on and keep writing: to its inherited stdout, to a
file it holds open, into its working directory. None of that may land in the
next trial of the slot, so:

* the three files are kept (truncated) only when no process still has them
  open for writing, which Linux tells for the price of a read lease
  (:func:`_unwritten`); otherwise they are made anew, so the stray writer
  writes to an inode no run reads;
* the working directory is kept for the next run only when the run left it
  empty and no process holds any of the three files open for writing (a
  process that outlives its trial inherits its stdout and stderr unless it
  closes them, and a daemon that closes them also leaves its cwd, by
  convention for ``/``). Otherwise it is removed and the next run gets one
  under a name no earlier run had (``run-N``): writes through the old cwd,
  or through a path into it, fail. Making and removing a directory for every
  run cost the agent 0.5 ms of CPU per trial on ext4 (a tenth of all the
  CPU a no-op trial costs, ``bench/dispatch_cpu.py``);
* the checkpoint directory is emptied: a process would have to leave the
  group *and* keep writing checkpoints after its trial ended.

Nothing here follows a symbolic link: a trial may replace any of these paths
with a link (its checkpoint directory onto a volume, say), and cleaning up
removes the link, never what it points to. A tree that cannot be cleaned (a
trial made a file undeletable) is abandoned for a fresh one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spotsweep.shared import log

_log = log.get("spotsweep.agent")
FILES = ("metrics.jsonl", "stdout.log", "stderr.log")


@dataclass(frozen=True)
class Paths:
    """Where one run's files are (``SPOTSWEEP_METRICS``, cwd, ``SPOTSWEEP_CHECKPOINT_DIR``...)."""

    root: Path
    run: Path
    checkpoint: Path
    metrics: Path
    stdout: Path
    stderr: Path


def _paths(root: Path, cwd: str) -> Paths:
    return Paths(root, root / cwd, root / "checkpoint", root / "metrics.jsonl", root / "stdout.log", root / "stderr.log")


def _is_dir(path: str | Path) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove(path: str | Path) -> None:
    """Delete ``path`` whatever it is; a link is removed, never followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        os.unlink(path)
        return
    try:
        os.rmdir(path)  # most trials leave their cwd empty: one call
    except OSError:
        shutil.rmtree(path)  # removes links inside it without following them


def _unwritten(path: str | Path) -> bool:
    """Whether ``path`` is a regular file (not a link) that no process has open for writing.

    Linux grants a read lease only then (fcntl(2), F_SETLEASE); taking one and
    dropping it at once costs two calls, against an inode freed and another
    allocated to make the file anew. Elsewhere, or on a filesystem without
    leases: False, and the file is made anew.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return True
    except (OSError, AttributeError):  # EAGAIN: a writer holds it; no F_SETLEASE here
        return False
    finally:
        os.close(fd)


def _empty(directory: str | Path) -> None:
    """Remove what is inside ``directory`` (one listing when there is nothing)."""
    with os.scandir(directory) as entries:
        names = [e.path for e in entries]
    for path in names:
        _remove(path)


def _is_empty(directory: str) -> bool:
    with os.scandir(directory) as entries:
        return next(entries, None) is None


def slot_label(index: int) -> str:
    """The name of slot ``index``'s tree: it carries this agent's pid, so that
    another agent can tell a tree whose agent is gone (:func:`remove_stale`)."""
    return f"slot{index}-p{os.getpid()}"


def remove_stale(parent: Path) -> None:
    """Delete the slot trees under ``parent`` whose agent process is gone.

    An agent removes its trees when it exits; one killed outright (kill -9,
    the OOM killer) cannot, so the next agent started on the node does.
    """
    try:
        entries = list(parent.glob("slot*-p*-*"))
    except OSError:
        return
    for entry in entries:
        try:
            pid = int(entry.name.split("-")[1][1:])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not ours to judge
    return True


class Workspace:
    """The scratch tree of one slot (or of one run, with ``reuse=False``).

    Used by one trial at a time: the agent hands a slot to one trial only.
    """

    def __init__(self, parent: Path, label: str = "run", reuse: bool = True) -> None:
        self.parent = parent
        self.label = label
        self.reuse = reuse
        self._root: Path | None = None
        self._runs = 0  # names each new working directory: a path no earlier run had
        self._kept: str | None = None  # the last run's cwd, empty and fit for the next (see the module's docstring)

    @contextmanager
    def use(self, prefix: str) -> Iterator[Paths]:
        """A clean tree for one run, cleaned (or removed) when the run is over.
        ``prefix`` names a throwaway tree (the trial and attempt), for whoever looks."""
        root = self._root if self.reuse else None
        new_tree = root is None or not _is_dir(root)
        if root is None or new_tree:
            self.parent.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix=f"{self.label if self.reuse else prefix}-", dir=self.parent))
            (root / "checkpoint").mkdir()
        self._root = root if self.reuse else None
        kept, self._kept = (self._kept if not new_tree else None), None
        if kept is None:
            self._runs += 1
        paths = _paths(root, kept or f"run-{self._runs}")
        try:
            # A cwd of its own, or the last run's left empty (see the module's
            # docstring); the checkpoint directory was emptied and the files
            # truncated (or removed) when the last run ended. The runner opens
            # stdout and stderr itself.
            if kept is None:
                os.mkdir(paths.run)
            os.close(os.open(paths.metrics, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
        except OSError:
            if new_tree:  # a new tree failed: the disk, not the last run
                raise
            # Not as the last run left it: start over in a fresh tree.
            shutil.rmtree(root, ignore_errors=True)
            self._root = None
            with self.use(prefix) as fresh:
                yield fresh
            return
        try:
            yield paths
        finally:
            if self.reuse:
                self._reset(root, paths.run.name)
            else:
                shutil.rmtree(root, ignore_errors=True)

    def _reset(self, root: Path, cwd: str) -> None:
        # Plain strings, not Paths: this runs after every trial, and each Path
        # join parses its parts again.
        try:
            with os.scandir(root) as entries:
                found = [(e.name, e.path) for e in entries]
            files = {name: _unwritten(path) for name, path in found if name in FILES}
            alone = len(files) == len(FILES) and all(files.values())  # no process outlived the run holding one
            for name, path in found:
                if name == "checkpoint" and _is_dir(path):
                    _empty(path)
                elif files.get(name):
                    os.truncate(path, 0)  # kept: no inode to allocate for the next run
                elif name == cwd and alone and _is_dir(path) and _is_empty(path):
                    self._kept = name  # no directory to make and remove for the next run
                else:  # a cwd in use or not empty, a file someone still writes, links put in their place, an upload's stage
                    _remove(path)
            checkpoint = os.path.join(root, "checkpoint")
            if not _is_dir(checkpoint):
                os.mkdir(checkpoint)
        except OSError as e:
            _log.warning("slot folder could not be emptied; the next trial gets a new one", folder=str(root), error=str(e))
            shutil.rmtree(root, ignore_errors=True)
            self._root = None

    def remove(self) -> None:
        """Delete the tree (the agent is exiting)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
