"""A slot's scratch folder, kept from one trial to the next.

Each run needs an empty working directory, an empty checkpoint directory and
three files (metrics, stdout, stderr). Making that tree with ``mkdtemp`` and
removing it with ``rmtree`` for every trial cost the agent more CPU than
anything else it does per trial (0.5-0.7 ms on ext4, measured with perf in
``bench/dispatch_cpu.py``: inode allocation and freeing, which ext4 makes
slower the more recently it freed inodes). A slot's trials run one after
another, so its tree is made once and emptied between trials instead: two
directory listings and three truncations when a trial left nothing behind.

What a trial leaves in its folders is removed when it ends, like before; a
tree that cannot be emptied (a trial made a file undeletable) is abandoned
for a fresh one. Processes the trial left running are killed before (see
:mod:`.runner`), so nothing writes into the next trial's files; a process
that escaped the trial's process group is outside any guarantee either way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spotsweep.shared import log

_log = log.get("spotsweep.agent")
FILES = ("metrics.jsonl", "stdout.log", "stderr.log")
DIRS = ("run", "checkpoint")


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


def _empty(directory: Path) -> None:
    """Remove what is inside ``directory`` (one listing when there is nothing)."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


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
        """An empty tree for one run; emptied (or removed) when the run is over.
        ``prefix`` names a throwaway tree (the trial and attempt), for whoever looks."""
        root = self._root if self.reuse else None
        if root is None or not root.is_dir():
            self.parent.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix=f"{self.label if self.reuse else prefix}-", dir=self.parent))
            for name in DIRS:
                (root / name).mkdir()
            for name in FILES:
                (root / name).touch()
        # A reused tree was emptied, its files truncated (not recreated: an
        # existing inode costs no allocation), when its last run ended.
        paths = _paths(root)
        self._root = root if self.reuse else None
        try:
            yield paths
        finally:
            if self.reuse:
                self._reset(root)
            else:
                shutil.rmtree(root, ignore_errors=True)

    def _reset(self, root: Path) -> None:
        try:
            for name in DIRS:
                _empty(root / name)
            with os.scandir(root) as entries:  # anything else (an interrupted upload's stage)
                extra = [e.path for e in entries if e.name not in FILES and e.name not in DIRS]
            for path in extra:
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
            for name in FILES:
                os.truncate(root / name, 0)  # a big log must not hold the disk until the slot's next trial
        except OSError as e:
            _log.warning("slot folder could not be emptied; the next trial gets a new one", folder=str(root), error=str(e))
            shutil.rmtree(root, ignore_errors=True)
            self._root = None

    def remove(self) -> None:
        """Delete the tree (the agent is exiting)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
