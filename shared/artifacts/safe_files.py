"""Walk a folder a trial controls without following a symbolic link anywhere.

A checkpoint directory belongs to the trial, which may have put anything in
it: a link to ``/etc/passwd``, to the agent's credentials file, to a
directory of another trial, a FIFO that blocks a reader for ever. Reading
through any of these would upload the target to the shared bucket with the
agent's privileges. So the checkpoint code reads a trial's files only
through :func:`regular_files`:

* each directory is opened relative to its parent's descriptor with
  ``O_NOFOLLOW | O_DIRECTORY`` and each file with ``O_NOFOLLOW``, so a path
  the trial swaps for a link between the listing and the open is refused,
  not followed (a check-then-open on path names would race);
* links, FIFOs, sockets and devices are skipped and named in ``skipped``
  (the caller logs them); an entry that vanished meanwhile is skipped
  silently (a script deleting an old checkpoint is normal);
* ``owner``: with ``--trial-user`` the agent runs as root and the trial as
  another user, so a hard link to a file only root may read would still be
  read with root's rights: files not owned by ``owner`` are skipped too.
  That is the simplest sound rule (a trial can only hand over what it
  owns), and it needs no helper process running as the trial's user;
* ``trial_uid``: the user the trial ran as. A hard link (``st_nlink > 1``)
  to a file another user owns is skipped whatever ``owner`` says; when the
  trial ran as root it owns every file, so ownership tells nothing and every
  hard link is skipped (a root trial once linked ``/etc/shadow`` into its
  checkpoint, and it was uploaded). The agent's own snapshot links are made
  after this walk, so they never count.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO never blocks the open


@dataclass
class Walk:
    """What a walk skipped: ``(relative path, why)``."""

    skipped: list[tuple[str, str]] = field(default_factory=list)

    def summary(self, limit: int = 10) -> str:
        shown = ", ".join(f"{rel} ({why})" for rel, why in self.skipped[:limit])
        more = len(self.skipped) - limit
        return shown + (f" and {more} more" if more > 0 else "")


class Entry(NamedTuple):
    """One regular file: its path under the walked directory, an open read-only
    descriptor, its ``fstat``, and its directory's descriptor and name there
    (to hard-link it with ``os.link(name, dst, src_dir_fd=dir_fd)``)."""

    rel: str
    fd: int
    stat: os.stat_result
    dir_fd: int
    name: str


@contextmanager
def _opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def regular_files(directory: str | os.PathLike[str], walk: Walk, owner: int | None = None,
                  trial_uid: int | None = None) -> Iterator[Entry]:
    """An :class:`Entry` for every regular file under ``directory``, sorted by
    path, no link followed; its descriptors are closed when the caller asks for
    the next file. ``directory`` itself must not
    be a link (``NotADirectoryError``/``OSError`` otherwise, ``FileNotFoundError`` when it is gone)."""
    top = os.open(directory, _DIR)
    with _opened(top):
        yield from _walk(top, "", walk, owner, trial_uid)


def refusal(st: os.stat_result, owner: int | None, trial_uid: int | None) -> str | None:
    """Why the regular file ``st`` is not the trial's to hand over, or None (see the module's docstring)."""
    if owner is not None and st.st_uid != owner:
        return f"owned by uid {st.st_uid}, not the trial's user"
    if trial_uid is not None and st.st_nlink > 1 and (st.st_uid != trial_uid or trial_uid == 0):
        whose = f"uid {st.st_uid}'s, not the trial's" if st.st_uid != trial_uid else "a trial running as root may link any file"
        return f"a hard link ({st.st_nlink} names) to a file the trial does not own ({whose})"
    return None


def _walk(dir_fd: int, prefix: str, walk: Walk, owner: int | None, trial_uid: int | None) -> Iterator[Entry]:
    try:
        names = sorted(os.listdir(dir_fd))
    except FileNotFoundError:
        return
    for name in names:
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _DIR, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            except OSError as e:  # swapped for a link or a file since the stat: not followed
                walk.skipped.append((rel, f"not a plain directory: {e.strerror}"))
                continue
            with _opened(sub):
                yield from _walk(sub, rel + "/", walk, owner, trial_uid)
            continue
        if not stat.S_ISREG(st.st_mode):
            walk.skipped.append((rel, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"))
            continue
        try:
            fd = os.open(name, _FILE, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        except OSError as e:  # ELOOP: swapped for a link since the stat
            walk.skipped.append((rel, f"not opened: {e.strerror}"))
            continue
        with _opened(fd):
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                walk.skipped.append((rel, "not a regular file"))
                continue
            why = refusal(st, owner, trial_uid)
            if why is not None:
                walk.skipped.append((rel, why))
                continue
            os.set_blocking(fd, True)
            yield Entry(rel, fd, st, dir_fd, name)


def fd_path(fd: int) -> str:
    """A path that opens the very file ``fd`` holds (for APIs that take a path: the store's ``put_file``)."""
    return f"/proc/self/fd/{fd}"


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
