"""The trial's code on an agent: a sweep's packed ``workdir``, fetched once per hash, copied per run.

A trial message with ``workdir_sha256`` runs in a fresh copy of that archive's
tree (so no trial sees what another wrote). The tree is cached under
``code/<sha256>/`` (``code/`` 0700: a trial reads its own copy only, never
another sweep's tree), made atomically: downloaded, its sha256 checked, unpacked
within caps (:mod:`.unpack`) into a temporary folder renamed into place, so a
reader never sees a half-made tree and two agents racing for one hash end
with the same one. Past the newest :data:`KEEP_TREES`, trees no run used for
:data:`IDLE_S` are deleted (a run copies its tree right after using it, so a
tree a slot may still be copying never is), and so are a killed agent's
temporary folders.

A missing or corrupt archive is a :class:`PermanentError` (the attempt fails
with it: every retry would meet the same archive), one the caps or checks
refuse a :class:`~spotsweep.shared.errors.Refused`; an unreachable store is
the store's :class:`RetryableError` (the trial goes back to the queue).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path

from spotsweep.services.agent.unpack import DEFAULT_CAPS, Caps, extract
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.codepack import code_key
from spotsweep.shared.errors import PermanentError

_log = log.get("spotsweep.agent")
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()
KEEP_TREES = 8  # code trees kept past their use: a few sweeps at once per node
IDLE_S = 600.0  # and any tree a run used this recently


def working_dir(store: ArtifactStore, cache: Path, sha256: str | None, in_place: Path | None, run: Path,
                caps: Caps = DEFAULT_CAPS) -> Path:
    """The trial's working directory: a copy of the archive ``sha256`` names in ``run`` (the run's
    own empty folder); without one, ``in_place`` (local mode's workdir), else ``run`` as it is."""
    if sha256 is None:
        return in_place if in_place is not None else run
    tree = fetch(store, cache, sha256, caps)
    shutil.copytree(tree, run, symlinks=True, dirs_exist_ok=True)
    return run


def fetch(store: ArtifactStore, cache: Path, sha256: str, caps: Caps = DEFAULT_CAPS) -> Path:
    """The cached tree of ``code/<sha256>.tar.gz``, downloaded and checked on first use."""
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o700)  # the agent's alone (an older agent's 0755 too): a run gets a copy, no trial reads it here
    tree = cache / sha256
    if tree.is_dir():
        return _used(tree)
    with _lock(sha256):
        if tree.is_dir():  # another slot made it meanwhile
            return _used(tree)
        with tempfile.TemporaryDirectory(dir=cache, prefix=f".{sha256[:12]}-") as tmp:
            archive, unpacked = Path(tmp) / "code.tar.gz", Path(tmp) / "tree"
            key = code_key(sha256)
            try:
                store.get_file(key, archive)
            except NotFound as e:
                raise PermanentError(f"the sweep's code archive {key} is not in the artifact store (submitted to "
                                     "another store, or deleted)") from e
            _check_hash(archive, sha256, key)
            extract(archive, unpacked, key, caps)
            try:
                os.rename(unpacked, tree)
            except OSError:
                if not tree.is_dir():  # not a racing agent's finished copy: a real failure
                    raise
        _log.info("code archive fetched", key=key)
    evict(cache, spare=sha256)
    return tree


def _used(tree: Path) -> Path:
    """``tree``, marked as just used (its mtime: what :func:`evict` ranks by)."""
    with suppress(OSError):  # evicted this instant by another agent on the node: the caller's copy fails and retries
        os.utime(tree)
    return tree


def evict(cache: Path, spare: str, keep: int | None = None, idle: float = IDLE_S, now: float | None = None) -> list[str]:
    """Delete the trees past the ``keep`` (:data:`KEEP_TREES`) most recently used that no run
    used for ``idle`` seconds, and temporary folders as old, never ``spare`` (the tree just
    made); returns the names deleted."""
    now = time.time() if now is None else now
    keep = KEEP_TREES if keep is None else keep
    entries = []
    for path in cache.iterdir():
        try:
            entries.append((path.stat().st_mtime, path))
        except OSError:
            continue  # deleted meanwhile
    trees = sorted(((m, p) for m, p in entries if not p.name.startswith(".")), reverse=True)
    doomed = [p for m, p in trees[keep:] if m < now - idle and p.name != spare]
    doomed += [p for m, p in entries if p.name.startswith(".") and m < now - idle]
    for path in doomed:
        with _lock(path.name):
            shutil.rmtree(path, ignore_errors=True)
    if doomed:
        _log.info("code cache: unused trees deleted", count=len(doomed), kept=min(len(trees), keep))
    return sorted(p.name for p in doomed)


def _lock(sha256: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(sha256, threading.Lock())


def _check_hash(archive: Path, sha256: str, key: str) -> None:
    digest = hashlib.sha256()
    with archive.open("rb") as f:
        for block in iter(lambda: f.read(1024 * 1024), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise PermanentError(f"the sweep's code archive {key} is corrupt: its sha256 is {digest.hexdigest()}")


