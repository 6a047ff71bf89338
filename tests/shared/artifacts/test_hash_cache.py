"""The cache of content hashes: a file is known unchanged by (device, inode, size, mtime), and one
modified within RACY_S of its hashing is never remembered (a same-tick write could hide)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from spotsweep.shared.artifacts.hash_cache import RACY_S, HashCache


def _file(path: Path, data: bytes, age: float) -> os.stat_result:
    path.write_bytes(data)
    then = time.time() - age
    os.utime(path, (then, then))
    return os.stat(path)


def test_an_old_file_is_remembered_until_its_size_or_mtime_changes(tmp_path: Path) -> None:
    cache = HashCache()
    st = _file(tmp_path / "base.pt", b"weights", age=60)
    cache.put(st, "h1", begun=time.time())
    assert cache.get(os.stat(tmp_path / "base.pt")) == "h1"
    os.link(tmp_path / "base.pt", tmp_path / "linked.pt")  # a snapshot's hard link: the same file
    assert cache.get(os.stat(tmp_path / "linked.pt")) == "h1"
    with open(tmp_path / "base.pt", "r+b") as f:  # same size, new content: a new mtime
        f.write(b"W")
    assert cache.get(os.stat(tmp_path / "base.pt")) is None
    st2 = _file(tmp_path / "other.pt", b"weights", age=60)  # another inode, same size and age
    assert cache.get(st2) is None


def test_a_file_modified_just_before_its_hash_began_is_not_remembered(tmp_path: Path) -> None:
    cache = HashCache()
    st = _file(tmp_path / "ckpt.pt", b"fresh", age=RACY_S / 2)
    cache.put(st, "h", begun=time.time())
    assert cache.get(st) is None


def test_the_least_recently_used_go_first(tmp_path: Path) -> None:
    cache = HashCache(size=2)
    a, b, c = (_file(tmp_path / n, n.encode(), age=60) for n in "abc")
    cache.put(a, "a", begun=time.time())
    cache.put(b, "b", begun=time.time())
    assert cache.get(a) == "a"  # a used last: b goes first
    cache.put(c, "c", begun=time.time())
    assert (cache.get(a), cache.get(b), cache.get(c)) == ("a", None, "c")
