"""A slot's scratch folder, kept from one trial to the next.

Each run needs an empty working directory, an empty checkpoint directory and
three files (metrics, stdout, stderr). Making that tree with ``mkdtemp`` and
removing it with ``rmtree`` for every trial cost the agent more CPU than
anything else it did per trial (0.5-0.7 ms on ext4, measured with perf
during ``bench/dispatch_cpu.py``: directory inodes allocated and freed, which
ext4 makes slower the more recently it freed some). A slot's trials run one
after another, so its tree is made once and only what must be new is made
again between trials.

What is new for each run, and why: the working directory and the three
files. The trial's process group is killed when its main process exits (see
:mod:`.runner`), but a process that left the group (``setsid``: a daemon a
script started, a logging service) may live on and keep writing to its
inherited stdout, to the metrics file it opened, or into its working
directory; new inodes send those writes where they went before, to files and
a directory no run sees, instead of into the next trial's logs, metrics and
cwd. The checkpoint directory is only emptied (a process would have to
escape the group *and* keep writing checkpoints after its trial ended).

Nothing here follows a symbolic link: a trial may replace any of these paths
with a link (its checkpoint directory onto a volume, say), and cleaning up
removes the link, never what it points to. A tree that cannot be cleaned (a
trial made a file undeletable) is abandoned for a fresh one.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Paths:
    """Where one run's files are (``SPOTSWEEP_METRICS``, cwd, ``SPOTSWEEP_CHECKPOINT_DIR``...)."""

    root: Path
    run: Path
    checkpoint: Path
    metrics: Path
    stdout: Path
    stderr: Path


def _paths(root: Path) -> Paths:
    return Paths(root, root / "run", root / "checkpoint", root / "metrics.jsonl", root / "stdout.log", root / "stderr.log")


def _is_dir(path: Path) -> bool:
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
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # removes links inside it without following them
    else:
        os.unlink(path)


def _empty(directory: Path) -> None:
    """Remove what is inside ``directory`` (one listing when there is nothing)."""
    with os.scandir(directory) as entries:
        names = [e.path for e in entries]
    for path in names:
        _remove(path)


class Workspace:
    """The scratch tree of one slot (or of one run, with ``reuse=False``).

    Used by one trial at a time: the agent hands a slot to one trial only.
    """

    def __init__(self, parent: Path, label: str = "run", reuse: bool = True) -> None:
        self.parent = parent
        self.label = label
        self.reuse = reuse
        self._root: Path | None = None

    @contextmanager
    def use(self, prefix: str) -> Iterator[Paths]:
        """A clean tree for one run, cleaned (or removed) when the run is over.
        ``prefix`` names a throwaway tree (the trial and attempt), for whoever looks."""
        root = self._root if self.reuse else None
        if root is None or not _is_dir(root):
            self.parent.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix=f"{self.label if self.reuse else prefix}-", dir=self.parent))
            (root / "checkpoint").mkdir()
        self._root = root if self.reuse else None
        paths = _paths(root)
        try:
            # New each run (see the module's docstring); the checkpoint
            # directory was emptied when the last run ended. stdout and
            # stderr are created by the runner as it opens them.
            paths.run.mkdir()
            os.close(os.open(paths.metrics, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError:
            if not self.reuse:
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
                self._reset(root)
            else:
                shutil.rmtree(root, ignore_errors=True)

    def _reset(self, root: Path) -> None:
        try:
            with os.scandir(root) as entries:
                names = [e.name for e in entries]
            for name in names:
                if name == "checkpoint" and _is_dir(root / name):
                    _empty(root / name)
                else:  # the run's files and cwd, links put in their place, an interrupted upload's stage
                    _remove(root / name)
            if not _is_dir(root / "checkpoint"):
                (root / "checkpoint").mkdir()
        except OSError as e:
            _log.warning("slot folder could not be emptied; the next trial gets a new one", folder=str(root), error=str(e))
            shutil.rmtree(root, ignore_errors=True)
            self._root = None

    def remove(self) -> None:
        """Delete the tree (the agent is exiting)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
