"""Whether a staged input's tree is as it was staged: a record of every entry's stat, taken once, compared at each link.

A trial running as root writes through 0444 (issue 40: 6 bytes appended to a
shard broke every later trial's checksum), and where no read-only mount
namespace can be made (:mod:`.ro_mount`) nothing stops it. What it leaves is
seen: a write, append, truncate, chmod, rename, link or utime sets the entry's
ctime to now, and no call sets a ctime back, so a tree whose entries' mode,
size, inode, mtime and ctime all match the record was not changed since
(an added or removed entry changes the listing). One ``lstat`` per entry:
about 14 ms per 1,000 files on ext4, the inodes cached. It catches a trial's
accident, not a root trial set on hiding one (root could rewrite the record too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def stats(tree: Path) -> dict[str, list[int]]:
    """Every entry below ``tree`` by its relative path: mode, size, inode, mtime and ctime (``tree`` itself left
    out: each use touches its mtime, and renaming it into place its ctime)."""
    out = {}
    for folder, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out[os.path.relpath(path, tree)] = [st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
    return out


def record(tree: Path, at: Path) -> None:
    """Write ``tree``'s stats to ``at``, atomically (a reader sees the old record or the new, never half); 0600:
    the record names every file of the tree, which only the trials the tree's gate lets in may see (tree_gate.py)."""
    part = at.with_name(f"{at.name}.{os.getpid()}.part")
    with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(json.dumps(stats(tree)))
    os.replace(part, at)


def intact(tree: Path, at: Path) -> bool:
    """Whether ``tree`` matches its record at ``at``. A tree without one (staged by an agent older than the
    records) is recorded now, as found."""
    try:
        recorded = json.loads(at.read_text())
    except FileNotFoundError:
        record(tree, at)
        return True
    except (OSError, ValueError):
        return False
    try:
        return bool(recorded == stats(tree))
    except OSError:  # an entry went while it was read: changed
        return False
