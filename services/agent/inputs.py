"""A trial's ``inputs`` on an agent: staged once per node in a content-addressed cache, linked read-only.

An ``s3://bucket/prefix/`` input is listed (one listing) and named by its
*version*: the sha256 of every object's key, size and ETag
(:func:`version_of`), so a changed object is a new version and an unchanged
prefix is the same one on every node. The version's tree is
``<cache>/<version>/``: made once per node however many trials want it at
once. Each version has two lock files (``flock``, so two agents on one node
share them too): ``.<version>.lock``, held shared by every trial using the
tree and exclusively by eviction, and ``.<version>.make``, which the one that
finds no tree takes exclusively while it downloads (the checkpoints' parallel download,
:func:`~spotsweep.shared.artifacts.transfer.download_files`, which checks
every size), lists again to check no object changed meanwhile, makes the
tree read-only (files 0444, folders 0555, owned by the agent) and renames it
into place behind a gate only the trials that link it pass (:mod:`.tree_gate`;
the cache itself 0711, listed by none); the others wait on the make lock only
(never on the trials already using the tree, which hold theirs for hours). Every trial using a tree holds a
shared lock on it for its whole run, and the trial gets a symbolic link at
``to`` in its working directory: it may remove the link, never change what
is behind it (not its files: they are not its user's; ``--trial-user``
makes that hold, and a root trial gets the trees read-only in a mount
namespace of its own: :mod:`.ro_mount`). Where neither holds, a tree found
changed since it was staged (:mod:`.tree_stats`, checked at every link) is
moved aside and staged again, never handed on.

A trial sees one version for its whole life: the versions its first staging
resolved are recorded in the store (``sweeps/<sweep>/trials/<trial>/inputs.json``), and a
later attempt uses those. If the prefix has changed since and this node's
cache no longer holds the recorded version, the attempt fails permanently
saying so (S3 keeps no old content to fetch again).

Past ``--input-cache-size`` the least recently used trees (by their folder's
mtime, set on every use) that no running trial holds are deleted, and so is
what a killed agent left (a half download) once no one holds its lock.

An absolute path (``from: /mnt/shared/x``, a shared filesystem) is linked
uncached, at the path it resolves to, and only when that is under one of the
operator's ``--input-paths`` and is a file or a folder that neither is nor
holds the node's devices, kernel files or daemons' sockets (:func:`node_path`):
a container bind-mounts it, so ``/``, ``/root`` or ``/run/docker.sock`` there
would be the node's root. Its own permissions say who may write to it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from spotsweep.services.agent import inputs_url, tree_gate, tree_stats
from spotsweep.services.agent.trial_user import TrialUser
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound, ObjectInfo
from spotsweep.shared.artifacts.transfer import download_files
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.inputs import Input
from spotsweep.shared.messages import TrialMessage

_log = log.get("spotsweep.agent")


def version_of(bucket: str, prefix: str, objects: list[ObjectInfo]) -> str:
    """The content version of a prefix's listing: equal listings (keys relative to the prefix,
    sizes, ETags) give equal versions; any changed, added or removed object a new one."""
    rows = sorted((o.key[len(prefix):], o.size, o.etag or (o.modified.isoformat() if o.modified else None))
                  for o in objects)
    return hashlib.sha256(json.dumps([bucket, rows]).encode()).hexdigest()[:32]


def pin_key(msg: TrialMessage) -> str:
    """Where the versions a trial's first staging resolved are recorded."""
    return f"sweeps/{msg.sweep_id}/trials/{msg.trial_id}/inputs.json"  # under sweeps/: where agents may write


# Never bind-mounted into a trial, nor anything holding them: the node's devices, kernel interfaces and the
# daemons' sockets (/run/docker.sock, Podman's, containerd's; /var/run is a link to /run).
SYSTEM_PATHS = ("/dev", "/proc", "/sys", "/run", "/var/run")
_NOT_DATA = ((stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
             (stat.S_ISFIFO, "a named pipe"))


def node_path(item: Input, allowed: Sequence[str]) -> Path:
    """Where a node-path input (``from: /PATH``) resolves to, after every symbolic link, when the operator's
    ``allowed`` folders (``--input-paths``) hold it and it is a file or a folder of data; else a
    :class:`PermanentError` naming the input and the path (the attempt fails ``refused``)."""
    try:
        resolved = os.path.realpath(item.source)
    except OSError as e:  # a link the agent may not follow (/proc/1/root)
        raise PermanentError(f"input {item.source}: cannot be resolved on this node ({e.strerror})") from e
    where = f"input {item.source}" + (f" (resolves to {resolved})" if resolved != item.source else "")
    if not allowed:
        raise PermanentError(f"{where}: this agent links no node paths (start it with --input-paths FOLDER to allow "
                             "some), or stage the data from s3:// or https://")
    if not any(Path(resolved).is_relative_to(os.path.realpath(root)) for root in allowed):
        raise PermanentError(f"{where}: not under this agent's --input-paths ({', '.join(allowed)})")
    system = [p for p in SYSTEM_PATHS if Path(resolved).is_relative_to(p) or Path(p).is_relative_to(resolved)]
    if system:
        raise PermanentError(f"{where}: is or holds {system[0]}, the node's devices, kernel files or daemons' sockets; "
                             "never an input")
    try:
        mode = os.stat(resolved).st_mode
    except OSError as e:
        raise PermanentError(f"{where}: not on this node ({e.strerror})") from e
    kind = next((name for test, name in _NOT_DATA if test(mode)), None)
    if kind is not None:
        raise PermanentError(f"{where}: is {kind}, not a file or a folder of data; never an input")
    return Path(resolved)


def allowed_roots(setting: str | None) -> tuple[str, ...]:
    """``--input-paths``' folders (comma-separated absolute paths); () when unset. A relative one stops the agent."""
    roots = tuple(p.strip() for p in (setting or "").split(",") if p.strip())
    bad = [p for p in roots if not os.path.isabs(p)]
    if bad:
        raise PermanentError(f"--input-paths: {bad[0]!r} is not an absolute path (give folders such as /mnt/datasets)")
    return roots


@contextmanager
def staged(msg: TrialMessage, store: ArtifactStore, cache: Path, run: Path, cap_bytes: int,
           user: TrialUser | None = None, node_paths: Sequence[str] = (),
           guard: inputs_url.Guard | None = None) -> Iterator[None]:
    """Every input of ``msg`` linked into ``run`` for as long as the block runs (each tree held); node paths
    only under ``node_paths`` (:func:`node_path`), all checked before anything is staged.
    ``guard``: URL inputs' address policy, caps and the run's controls (:mod:`.inputs_url`)."""
    if not msg.inputs:
        yield
        return
    nodes = {item.to: node_path(item, node_paths) for item in msg.inputs if item.source.startswith("/")}
    try:
        pins: dict[str, str] = json.loads(store.get_bytes(pin_key(msg)))
    except NotFound:
        pins = {}
    except ValueError as e:
        raise PermanentError(f"the trial's record of its input versions ({pin_key(msg)}) is not JSON: {e}") from e
    resolved = dict(pins)
    with ExitStack() as held:
        for item in msg.inputs:
            if item.to in nodes:
                _link(nodes[item.to], run, item.to, user)
                continue
            tree, version = (_fetch_url(item, cache, pins.get(item.to), held, guard) if item.is_url
                             else _fetch(store, item, cache, pins.get(item.to), held))
            resolved[item.to] = version
            _link(tree, run, item.to, user)
        if resolved != pins:
            store.put_bytes(pin_key(msg), json.dumps(resolved).encode())
        evict(cache, cap_bytes)  # past the cap: the least recently used trees no trial holds (ours are held)
        yield


def _fetch(store: ArtifactStore, item: Input, cache: Path, pinned: str | None, held: ExitStack) -> tuple[Path, str]:
    """The tree of ``item``'s version (``pinned``, else the current one), held shared until ``held`` closes."""
    bucket, prefix = item.bucket_prefix
    in_bucket = getattr(store, "in_bucket", None)
    if in_bucket is None:
        raise PermanentError(f"input {item.source}: s3:// inputs need an agent with an S3 store (SPOTSWEEP_S3_ENDPOINT)")
    if bucket == getattr(store, "bucket", None):  # every sweep's checkpoints and logs: not for a spec to read
        raise PermanentError(f"input {item.source}: the artifact bucket {bucket!r} holds every sweep's checkpoints "
                             "and logs and is not an input source; put the data in a bucket of its own")
    source: ArtifactStore = in_bucket(bucket)
    objects = _listing(source, item)
    current = version_of(bucket, prefix, objects)
    version = _pinned(item, cache, current, pinned)
    make = None if version != current else (lambda staging: _make(source, item, objects, version, staging))
    return _hold(cache, version, make, held, item), version


def _fetch_url(item: Input, cache: Path, pinned: str | None, held: ExitStack,
               guard: inputs_url.Guard | None) -> tuple[Path, str]:
    """As :func:`_fetch`, for a URL. With ``sha256`` the version is known without asking: no request
    when this node holds it. Else one GET whose headers name the version; its body is read only when
    this node does not hold that version yet."""
    if item.sha256 is not None:
        version = inputs_url.version_of(item, None)
        return _hold(cache, version, lambda staging: inputs_url.fetch(item, staging, guard), held, item), version
    with inputs_url.opened(item, guard) as response:
        current = inputs_url.version_of(item, response.headers)
        version = _pinned(item, cache, current, pinned)
        make = None if version != current else (lambda staging: inputs_url.save(item, response, staging))
        return _hold(cache, version, make, held, item), version


def _pinned(item: Input, cache: Path, current: str, pinned: str | None) -> str:
    """The version a trial uses: the one its first attempt pinned (which this node must still hold), else the current."""
    if pinned is None or pinned == current:
        return current
    if not (cache / pinned).is_dir():
        raise PermanentError(f"input {item.source} changed since the trial's first attempt (version {pinned}, now "
                             f"{current}) and this node no longer holds the old one: the trial cannot see one "
                             "consistent version")
    return pinned


def _hold(cache: Path, version: str, make: Callable[[Path], None] | None, held: ExitStack, item: Input) -> Path:
    """``<cache>/<version>``, held shared until ``held`` closes; made by ``make(folder)`` under the version's
    exclusive lock when absent (the others wait on it), then made read-only and renamed into place."""
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o711)  # trial users pass through to their own trees (gated: tree_gate.py), list none
    tree = cache / version
    while True:
        fd = os.open(cache / f".{version}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if tree.is_dir() and tree_stats.intact(tree, _manifest(cache, version)):
            held.callback(os.close, fd)  # held shared while the trial runs: eviction passes it by
            os.utime(tree)  # used now: what eviction ranks by
            tree_gate.ensure(cache, tree)  # staged before gates: gated now
            return tree
        os.close(fd)  # not there: made under the make lock, then taken shared (a waiter never waits on the holders)
        with _locked(cache / f".{version}.make", fcntl.LOCK_EX):
            if tree.is_dir() and tree_stats.intact(tree, _manifest(cache, version)):
                continue
            if tree.is_dir():  # changed since it was staged (a root trial wrote to it): never handed on
                _log.warning("input changed on this node since it was staged: staged again", source=item.source,
                             version=version)
                os.rename(tree, cache / f".{version}-changed-{os.getpid()}-{time.monotonic_ns()}")
                if make is None:
                    raise PermanentError(f"input {item.source}: this node's copy of version {version} was changed "
                                         "by a trial and the source no longer has that version to stage it again")
            if make is None:
                raise PermanentError(f"input {item.source}: version {version} vanished from this node's cache")
            with tempfile.TemporaryDirectory(dir=cache, prefix=f".{version}-") as tmp:
                staging = Path(tmp) / "tree"
                staging.mkdir()
                started = time.monotonic()
                make(staging)
                _read_only(staging)
                tree_stats.record(staging, _manifest(cache, version))  # before it is there: never found unrecorded
                tree_gate.place(cache, staging, tree)  # behind a gate only its own trials pass
            total, seconds = _size(tree), time.monotonic() - started
            _log.info("input staged", source=item.source, version=version, bytes=total, seconds=round(seconds, 3),
                      mib_per_s=round(total / 2**20 / max(seconds, 1e-6), 1))


def _manifest(cache: Path, version: str) -> Path:
    """Where the stats of the version's tree as staged are recorded (:mod:`.tree_stats`)."""
    return cache / f".{version}.manifest"


def _listing(source: ArtifactStore, item: Input) -> list[ObjectInfo]:
    bucket, prefix = item.bucket_prefix
    objects = [o for o in source.list_info(prefix) if not o.key.endswith("/")]
    if not objects:
        raise PermanentError(f"input {item.source}: no object under s3://{bucket}/{prefix}")
    return objects


def _make(source: ArtifactStore, item: Input, objects: list[ObjectInfo], version: str, staging: Path) -> None:
    """Download ``objects`` into ``staging``, every size checked, and check the prefix did not change meanwhile."""
    bucket, prefix = item.bucket_prefix
    sizes = {o.key[len(prefix):]: o.size or 0 for o in objects}
    if any(not rel or rel.startswith("/") or ".." in rel.split("/") for rel in sizes):
        raise PermanentError(f"input {item.source}: an object's key does not make a safe path under the prefix")
    if not download_files(source, prefix, sizes, staging):
        raise RetryableError(f"input {item.source}: an object vanished or changed size while it was downloaded")
    if version_of(bucket, prefix, _listing(source, item)) != version:
        raise RetryableError(f"input {item.source} changed while it was downloaded: staged again on the next try")


def _read_only(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)


def _link(target: Path, run: Path, to: str, user: TrialUser | None) -> None:
    """A symbolic link at ``run/to`` to ``target``; folders made on the way are the trial's."""
    link = run / to
    for parent in reversed(link.relative_to(run).parents[:-1]):
        folder = run / parent
        if not folder.is_dir():
            folder.mkdir()
            if user is not None:
                os.chown(folder, user.uid, user.gid)
    if link.is_symlink() or link.exists():
        raise PermanentError(f"input to {to!r}: the trial's code already has something at that path")
    os.symlink(target, link)


@contextmanager
def _locked(path: Path, how: int) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how)
        yield fd
    finally:
        os.close(fd)


def evict(cache: Path, cap_bytes: int) -> list[str]:
    """Delete the least recently used trees until the cache holds at most ``cap_bytes``,
    skipping those a running trial holds; returns the versions deleted."""
    _leftovers(cache)
    trees = []
    for path in cache.iterdir() if cache.is_dir() else []:
        if not path.name.startswith(".") and path.is_dir():
            try:
                trees.append((path.stat().st_mtime, path, _size(path)))
            except OSError:
                continue
    total = sum(size for _, _, size in trees)
    gone: list[str] = []
    for _, path, size in sorted(trees):
        if total <= cap_bytes:
            break
        try:
            with _locked(cache / f".{path.name}.lock", fcntl.LOCK_EX | fcntl.LOCK_NB):
                if path.is_dir():
                    doomed = cache / f".{path.name}-evicted"
                    os.rename(path, doomed)
                    _remove(doomed)
                    _manifest(cache, path.name).unlink(missing_ok=True)
                    total -= size
                    gone.append(path.name)
        except BlockingIOError:
            continue  # a trial is using it
    if gone:
        _log.info("input cache: least recently used versions deleted", versions=gone, bytes_left=total)
    return gone


def _leftovers(cache: Path) -> None:
    """Delete what a killed agent left: a download's temporary folder (``.<version>-...``) or a tree
    evicted halfway, each only while no one holds its version's make lock (a download going on holds it)."""
    for path in cache.iterdir() if cache.is_dir() else []:
        if not (path.name.startswith(".") and "-" in path.name and path.is_dir()):
            continue
        with suppress(BlockingIOError), _locked(cache / f".{path.name[1:].split('-', 1)[0]}.make",
                                                fcntl.LOCK_EX | fcntl.LOCK_NB):
            _remove(path)


def _remove(tree: Path) -> None:
    """Delete a read-only tree (its folders made writable first: an agent that is not root needs that)."""
    for folder, _, _ in os.walk(tree):
        os.chmod(folder, 0o700)  # writable for its owner only: no trial enters a tree being deleted
    shutil.rmtree(tree, ignore_errors=True)


def _size(tree: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(tree) for f in files)
