"""Content hashes of files already hashed, by what tells an unchanged file apart.

A frozen base model under LoRA adapters is the same file at every checkpoint:
the agent's snapshot hard-links the trial's files, so it keeps its device, inode,
size and modification time. Hashing its gigabytes again before each copy in the
store costs about 1.2 s of a core per GiB (``bench/checkpoint.py``) for a
result already known. The agent is a long-lived process, so one cache serves
every checkpoint of every trial it runs.

Keyed as git's index keys a file (device, inode, size, mtime in ns). Like git's
"racily clean" rule, a file modified less than :data:`RACY_S` before its hash
was begun is not remembered: a write in the same timestamp tick after the read
would leave all four unchanged. A file copied rather than linked (another
device) is a new inode each time and is simply hashed again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

RACY_S = 2.0  # well above any filesystem's timestamp granularity (ext4: a jiffy; FAT: 2 s)
_MAX = 4096  # entries: the large files of a few trials' checkpoints

Key = tuple[int, int, int, int]


def key_of(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class HashCache:
    """Thread-safe, least recently used first out; see the module's docstring."""

    def __init__(self, size: int = _MAX) -> None:
        self._entries: OrderedDict[Key, str] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, st: os.stat_result) -> str | None:
        """The hash of the file ``st`` describes, when it was hashed before and has not changed."""
        with self._lock:
            digest = self._entries.get(key_of(st))
            if digest is not None:
                self._entries.move_to_end(key_of(st))
            return digest

    def clear(self) -> None:
        """Forget every hash (a benchmark's cold case)."""
        with self._lock:
            self._entries.clear()

    def put(self, st: os.stat_result, digest: str, begun: float) -> None:
        """Remember ``digest``, computed from reads that began at ``begun`` (``time.time()``),
        unless the file was modified too close to then to be sure it did not change after."""
        if st.st_mtime_ns >= (begun - RACY_S) * 1e9:
            return
        with self._lock:
            self._entries[key_of(st)] = digest
            self._entries.move_to_end(key_of(st))
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


HASHES = HashCache()
