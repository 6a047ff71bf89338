"""A checkpoint's files to and from the store: in parallel, by parts, unchanged files copied.

On a remote object store every request costs a round trip, so the files go
:data:`~.workers.WORKERS` at a time (a checkpoint of 20,000 one-byte files
took 175 s one PUT at a time) and a large file goes as a multipart upload of
:data:`CHUNK`-sized parts in parallel. It comes back as parallel ranged GETs
streamed into place by offset (``pwrite``): a few large ranges rather than
many small ones (moto, for one, copies the whole object for every range it
serves). Stores without parts or ranges get whole-file calls.

Each file's content hash (SHA-256 over the SHA-256 of each 8 MiB chunk, so the
chunks hash in parallel, from the very bytes a part sends) goes into the
``MANIFEST``. A file whose size and hash equal those of the same path in the
previous committed folder (a frozen base model under LoRA adapters) is copied
inside the store (S3 CopyObject) instead of sent again: every folder still
holds its own copy, so pruning the old one never takes a file from it.
Hashing costs 0.6-1.3 s of one core per GiB (``bench/checkpoint.py``); a file
hashed before and not modified since (:mod:`.hash_cache`: the same inode, size
and mtime) is not read again.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TypeVar, cast

from spotsweep.shared.artifacts.hash_cache import HASHES, HashCache
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.artifacts.safe_files import Entry, fd_path
from spotsweep.shared.artifacts.workers import WORKERS, Batch, Fds
from spotsweep.shared.middleware import Backoff, retrying

MiB = 1 << 20
CHUNK = 8 * MiB  # hash chunk, part and range size (boto3's default part size)
DEDUPE_MIN = 256 * 1024  # smaller files are not worth a comparison (a PUT costs what a copy does)
HASH = "sha256/8MiB-chunks"  # the hash scheme a MANIFEST's ``hashes`` use
_REQUEST = Backoff(base=0.2, cap=2.0, attempts=3)  # one part or file, before the whole upload is retried
T = TypeVar("T")


def _retry(fn: Callable[[], T], what: str) -> T:
    """One request, retried in place (a flaky part costs that part, not the whole checkpoint)."""
    return cast(T, retrying(fn, _REQUEST, what=what))


def _combine(chunks: list[bytes]) -> str:
    return hashlib.sha256(b"".join(chunks)).hexdigest()


def _parts_of(store: ArtifactStore) -> bool:
    return type(store).start_multipart is not ArtifactStore.start_multipart


def _ranges_of(store: ArtifactStore) -> bool:
    return type(store).get_range_into is not ArtifactStore.get_range_into


def _spans(size: int) -> list[tuple[int, int]]:
    """(offset, length) of each part: CHUNK-sized, larger only past S3's 10,000 parts."""
    step = CHUNK * max(1, -(-size // (CHUNK * 9000)))
    return [(off, min(step, size - off)) for off in range(0, size, step)] or [(0, 0)]


@dataclass
class Previous:
    """The previous committed folder of the trial: where its files are and what they were."""

    files_prefix: str
    sizes: dict[str, int]
    hashes: dict[str, str]

    def same(self, rel: str, size: int) -> str | None:
        """The hash to compare with, when ``rel`` may be unchanged (same size, worth a copy)."""
        if size < DEDUPE_MIN or self.sizes.get(rel) != size:
            return None
        return self.hashes.get(rel)


@dataclass
class Sent:
    """What an upload did: each file's hash, and the files copied inside the store instead of sent."""

    hashes: dict[str, str] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class _Upload:
    """One checkpoint upload: the batch, the open files, the multipart uploads to abort on failure."""

    def __init__(self, store: ArtifactStore, prefix: str, previous: Previous | None, batch: Batch,
                 hashes: HashCache = HASHES) -> None:
        self.store, self.prefix, self.previous, self.batch, self.hashes = store, prefix, previous, batch, hashes
        self.sent = Sent()
        self.open: dict[str, str] = {}  # key -> multipart upload id, until completed
        self.fds = Fds()

    def file(self, rel: str, fd: int, st: os.stat_result) -> None:
        """The job of one file (``fd`` is ours, closed once the file is done; ``st`` its fstat)."""
        size, begun = st.st_size, time.time()
        known = self.previous.same(rel, size) if self.previous else None
        if known is not None and self.hashes.get(st) == known:  # hashed before and not modified since: no read
            self._finish(rel, fd, known, known, lambda: self._put(rel, fd) if size <= CHUNK else
                         self._send(rel, fd, size, None))
        elif size <= CHUNK:
            data = os.pread(fd, size, 0)
            digest = _combine([hashlib.sha256(data).digest()])
            self._remember(st, digest, begun)
            self._finish(rel, fd, digest, known, lambda: self._put(rel, fd))
        elif known is not None or not _parts_of(self.store):
            def hashed(digest: str, digests: list[bytes]) -> None:
                self._remember(st, digest, begun)
                self._finish(rel, fd, digest, known, lambda: self._send(rel, fd, size, digests))
            _Chunks(self, rel, fd, size, hashed)
        else:
            self._multipart(rel, fd, size, None, partial(self._remember, st, begun=begun))

    def _remember(self, st: os.stat_result, digest: str, begun: float) -> None:
        if st.st_size >= DEDUPE_MIN:  # only files worth a copy are ever compared
            self.hashes.put(st, digest, begun)

    def _finish(self, rel: str, fd: int, digest: str, known: str | None, send: Callable[[], None]) -> None:
        with self.sent.lock:
            self.sent.hashes[rel] = digest
        if known == digest and self.previous is not None:
            try:
                source = self.previous.files_prefix + rel
                _retry(lambda: self.store.copy(source, self.prefix + rel), "copy an unchanged checkpoint file")
                with self.sent.lock:
                    self.sent.copied.append(rel)
                self.fds.close(fd)
                return
            except NotFound:
                pass  # pruned by another writer meanwhile: send it
        send()

    def _put(self, rel: str, fd: int) -> None:
        try:
            _retry(lambda: self.store.put_file(self.prefix + rel, Path(fd_path(fd))), "upload a checkpoint file")
        finally:
            self.fds.close(fd)

    def _send(self, rel: str, fd: int, size: int, digests: list[bytes] | None) -> None:
        """A file whose hash is known: as parts where the store has them, else whole."""
        if _parts_of(self.store):
            self._multipart(rel, fd, size, digests)
        else:
            self._put(rel, fd)

    def _multipart(self, rel: str, fd: int, size: int, digests: list[bytes] | None,
                   hashed: Callable[[str], None] = lambda digest: None) -> None:
        """Parts in parallel; each part's chunks hashed on the way unless ``digests`` has them
        (a one-chunk part hands its digest to the store, which need not hash it again)."""
        hashing = digests is None
        key, spans = self.prefix + rel, _spans(size)
        upload_id = _retry(lambda: self.store.start_multipart(key), "start a multipart upload")
        with self.sent.lock:
            self.open[key] = upload_id
        etags: list[str | None] = [None] * len(spans)
        chunks: list[list[bytes]] = [[] for _ in spans]
        left = [len(spans)]
        lock = threading.Lock()

        def part(n: int) -> None:
            off, length = spans[n]
            data = os.pread(fd, length, off)
            if hashing:
                chunks[n] = [hashlib.sha256(data[i:i + CHUNK]).digest() for i in range(0, max(len(data), 1), CHUNK)]
            else:
                chunks[n] = (digests or [])[off // CHUNK:(off + length + CHUNK - 1) // CHUNK]
            sha = chunks[n][0] if length <= CHUNK and len(chunks[n]) == 1 else None
            etags[n] = _retry(lambda: self.store.put_part(key, upload_id, n + 1, data, sha), "upload a checkpoint part")
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self.fds.close(fd)
                if self.batch.failed():  # abandoned or failed: abort() aborts it, completing it would only fail
                    return
                _retry(lambda: self.store.complete_multipart(key, upload_id, [e or "" for e in etags]),
                       "complete a multipart upload")
                with self.sent.lock:
                    del self.open[key]
                if hashing:
                    digest = _combine([c for cs in chunks for c in cs])
                    with self.sent.lock:
                        self.sent.hashes[rel] = digest
                    hashed(digest)

        for n in range(len(spans)):
            self.batch.add(partial(part, n))

    def abort(self) -> None:
        """Best effort, in the background (the store may be what failed): parts of an
        abandoned upload would otherwise stay stored, unseen, until a lifecycle rule."""
        self.fds.close_all()
        with self.sent.lock:
            started = list(self.open.items())
        for key, upload_id in started:
            threading.Thread(target=_quietly, args=(self.store.abort_multipart, key, upload_id), daemon=True).start()


class _Chunks:
    """Hash a large file's chunks as parallel jobs, then call ``then(digest, chunk digests)`` in the last one."""

    def __init__(self, upload: _Upload, rel: str, fd: int, size: int, then: Callable[[str, list[bytes]], None]) -> None:
        self.digests: list[bytes] = [b""] * len(range(0, size, CHUNK))
        self.left, self.lock, self.fd, self.then = len(self.digests), threading.Lock(), fd, then
        for n in range(len(self.digests)):
            upload.batch.add(partial(self.chunk, n))

    def chunk(self, n: int) -> None:
        self.digests[n] = hashlib.sha256(os.pread(self.fd, CHUNK, n * CHUNK)).digest()
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            self.then(_combine(self.digests), self.digests)


def _quietly(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - best effort: an abort that fails leaves what a lifecycle rule removes
        pass


def upload_files(store: ArtifactStore, prefix: str, entries: Iterable[Entry], previous: Previous | None = None,
                 cancel: Callable[[], bool] | None = None, workers: int = WORKERS) -> tuple[dict[str, int], Sent]:
    """Upload every file ``entries`` yields under ``prefix`` + its path; their sizes and what was sent.
    Raises the first error (after the per-request retries), or :class:`~.workers.TransferCancelled`."""
    batch = Batch(workers, cancel, name="ckpt-up")
    upload = _Upload(store, prefix, previous, batch)
    sizes: dict[str, int] = {}
    try:
        for entry in entries:  # the walk's descriptors close at the next file: each job gets its own
            batch.room(4 * workers)  # back-pressure: open descriptors stay bounded
            fd = upload.fds.add(os.dup(entry.fd))
            sizes[entry.rel] = entry.stat.st_size
            batch.add(partial(upload.file, entry.rel, fd, entry.stat))
        batch.wait()
    except BaseException:
        upload.abort()
        raise
    return sizes, upload.sent


class _Damaged(Exception):
    """A file is missing or not the size its MANIFEST says."""


def download_files(store: ArtifactStore, prefix: str, sizes: dict[str, int], staging: Path, workers: int = WORKERS) -> bool:
    """Download ``prefix`` + each path of ``sizes`` into ``staging``; False when one is missing or of the wrong size."""
    batch, fds = Batch(workers, name="ckpt-down"), Fds()
    made: set[Path] = set()
    ranged = _ranges_of(store)
    large = sum(1 for size in sizes.values() if size > CHUNK)
    try:
        for rel, size in sizes.items():
            target = staging.joinpath(*PurePosixPath(rel).parts)
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            if ranged and size > CHUNK:
                _ranged(store, batch, fds, prefix + rel, target, size, _range_size(size, large, workers))
            else:
                batch.add(partial(_whole, store, prefix + rel, target, size))
        batch.wait()
    except (_Damaged, NotFound):
        batch.settle()  # no job still writing into the staging folder the caller removes
        return False
    except BaseException:
        batch.settle()
        raise
    finally:
        fds.close_all()
    return True


def _whole(store: ArtifactStore, key: str, target: Path, size: int) -> None:
    _retry(lambda: store.get_file(key, target), "download a checkpoint file")
    if target.stat().st_size != size:
        raise _Damaged(key)


def _range_size(size: int, large: int, workers: int) -> int:
    """Bytes per ranged GET of one of ``large`` large files: enough ranges to keep every
    worker busy, but none under :data:`CHUNK` (each range is a request; a range streams
    into the file, so a large one costs no memory)."""
    ranges = max(1, -(-workers // max(large, 1)))
    return max(CHUNK, -(-size // ranges))


def _ranged(store: ArtifactStore, batch: Batch, fds: Fds, key: str, target: Path, size: int, step: int) -> None:
    """Parallel ranged GETs into a file of the right size, each written at its offset."""
    fd = fds.add(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
    os.ftruncate(fd, size)
    spans = [(off, min(step, size - off)) for off in range(0, size, step)]
    left = [len(spans)]
    lock = threading.Lock()

    def fetch(off: int, length: int) -> None:
        try:
            written, total = _retry(lambda: store.get_range_into(key, off, length, fd), "download a checkpoint part")
            if total != size or written != length:
                raise _Damaged(key)
        finally:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    fds.close(fd)

    for off, length in spans:
        batch.add(partial(fetch, off, length))
