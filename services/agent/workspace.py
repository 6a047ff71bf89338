"""Each run's scratch tree: made new for the run, removed when it is over.

Every run gets a tree of its own (working and checkpoint directories, the
metrics file and the logs) under a name no other run had, removed when the
run ends: nothing one trial leaves behind reaches the next, not even what a
process that left its group (``setsid``) writes after the trial ended, into
a tree no run reads any more. Removal never follows a symbolic link: a trial
may replace any of these paths with one, and cleaning up removes the link,
never what it points to.

With ``--trial-user`` the run's folders belong to the trial's user, 0700,
and the tree to the agent (:func:`_hand_over`): one trial cannot read another's.

Each tree's name starts with ``p<agent pid>-``: an agent killed outright
(kill -9, the OOM killer) cannot remove its trees, and the next agent started
on the node removes those whose agent is gone (:func:`remove_stale`).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from spotsweep.services.agent.trial_user import TrialUser

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
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


_names = itertools.count()


def _make_root(parent: Path, label: str) -> str:
    """A new directory under ``parent`` named ``p<pid>-<label>-<n>``: this agent's
    mark, the label made safe as a file name, a number no earlier run of this
    agent had (a name left by an earlier agent with the same pid is skipped)."""
    head = os.path.join(parent, f"p{os.getpid()}-{_UNSAFE.sub('_', label)[:64]}-")
    while True:
        root = f"{head}{next(_names)}"
        try:
            os.mkdir(root, 0o700)
            return root
        except FileExistsError:
            continue
        except FileNotFoundError:
            parent.mkdir(parents=True, exist_ok=True)


def _remove_tree(root: str) -> None:
    """Remove a run's tree: the few calls a tidy run needs, else ``rmtree``
    (which removes links inside the tree without following them)."""
    try:
        for name in FILES:
            with suppress(FileNotFoundError):
                os.unlink(os.path.join(root, name))
        os.rmdir(os.path.join(root, "run"))
        os.rmdir(os.path.join(root, "checkpoint"))
        os.rmdir(root)
    except OSError:  # something left in it, a folder replaced by a file or a link
        shutil.rmtree(root, ignore_errors=True)


def _hand_over(root: str, user: TrialUser) -> None:
    """The tree of a run as ``user`` (``--trial-user``): the folder itself stays the
    agent's, 0711 (the trial can reach its paths but not list it, rename them or swap
    them for links: checkpoint snapshots are staged there); ``run/`` and
    ``checkpoint/`` are the user's, 0700, and ``metrics.jsonl`` 0600, so no other
    user, another trial's included, can read them; the logs are the agent's, 0600
    (the trial writes them through the descriptors it inherits)."""
    os.chmod(root, 0o711)
    for name in ("run", "checkpoint", "metrics.jsonl"):
        os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)
    for name in ("stdout.log", "stderr.log"):
        os.close(os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))


@contextmanager
def fresh(parent: Path, label: str, user: TrialUser | None = None) -> Iterator[Paths]:
    """A new, empty tree for one run under ``parent``, removed when the run is over.
    ``label`` (the trial and attempt) goes into its name, for whoever looks; ``user``:
    the trial runs as that user (:func:`_hand_over`)."""
    root = _make_root(parent, label)
    try:
        os.mkdir(os.path.join(root, "run"), 0o700)
        os.mkdir(os.path.join(root, "checkpoint"), 0o700)
        os.close(os.open(os.path.join(root, "metrics.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o644 if user is None else 0o600))
        if user is not None:
            _hand_over(root, user)
        top = Path(root)  # the runner opens stdout and stderr itself
        yield Paths(top, top / "run", top / "checkpoint", top / "metrics.jsonl", top / "stdout.log", top / "stderr.log")
    finally:
        _remove_tree(root)


def _owner(name: str) -> int | None:
    """The agent pid a tree's name starts with (``p1234-...``), if it has one."""
    head = name.split("-", 1)[0]
    return int(head[1:]) if head[:1] == "p" and head[1:].isdigit() else None


def remove_stale(parent: Path) -> None:
    """Delete the trees under ``parent`` whose agent process is gone (killed outright)."""
    _remove_trees(parent, lambda pid: pid != os.getpid() and not psutil.pid_exists(pid))


def remove_own(parent: Path) -> None:
    """Delete this agent's trees under ``parent`` (it is exiting: runs it stopped
    hard may not have removed theirs)."""
    _remove_trees(parent, lambda pid: pid == os.getpid())


def _remove_trees(parent: Path, doomed: Callable[[int], bool]) -> None:
    """Delete the trees under ``parent`` whose agent pid is ``doomed`` (another user's process is alive)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        pid = _owner(entry.name)
        if pid is not None and doomed(pid):
            shutil.rmtree(entry, ignore_errors=True)
