"""The artifact store as a plain directory: local mode and unit tests.

Every write goes to a temporary file in the destination's own directory, is
fsynced, then renamed over the target with :func:`os.replace`. A rename within
one filesystem is atomic, so a concurrent reader sees either the old file or
the new one, never half of one; the fsync makes the rename safe across a power
cut (otherwise the rename can reach the disk before the data does).

Keys are ``/``-separated relative paths and may not leave the root: absolute
keys, ``..``, ``.`` and empty components are refused with
:class:`~spotsweep.shared.errors.PermanentError`.
"""

from __future__ import annotations

import builtins

import glob
import hashlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from spotsweep.shared.artifacts.port import ArtifactStore, NotFound, ObjectInfo
from spotsweep.shared.errors import PermanentError

# Temporary files carry this suffix so ``list`` can skip writes in flight.
_TMP_SUFFIX = ".spotsweep-tmp"
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


class LocalArtifactStore(ArtifactStore):
    """Artifacts as files under ``root`` (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"LocalArtifactStore(root={str(self.root)!r})"

    # -- keys -----------------------------------------------------------------

    def _path(self, key: str) -> Path:
        """The file for ``key``; refuses keys that would land outside the root."""
        parts = key.split("/")
        if (
            not key
            or key.startswith("/")
            or "\\" in key
            or any(p in ("", ".", "..") for p in parts)
            or parts[-1].endswith(_TMP_SUFFIX)
        ):
            raise PermanentError(f"invalid artifact key {key!r}: must be a relative path inside the store")
        path = self.root.joinpath(*parts)
        # A symlink inside the root could still point out of it.
        if not path.resolve().is_relative_to(self.root):
            raise PermanentError(f"invalid artifact key {key!r}: resolves outside the store root")
        return path

    # -- writes ---------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> str:
        _write_atomically(self._path(key), lambda f: f.write(data))
        return self.uri(key)

    def put_file(self, key: str, path: Path) -> str:
        target = self._path(key)
        with open(path, "rb") as src:
            _write_atomically(target, lambda f: shutil.copyfileobj(src, f, 1024 * 1024))
        return self.uri(key)

    def copy(self, source: str, key: str) -> str:
        target = self._path(key)
        with self._reading(source) as fd, open(fd, "rb", closefd=False) as src:
            _write_atomically(target, lambda f: shutil.copyfileobj(src, f, 1024 * 1024))
        return self.uri(key)

    # -- multipart: each part a temporary file beside the target, joined at completion --

    def _part(self, key: str, upload_id: str, number: int) -> Path:
        if not _UPLOAD_ID.match(upload_id) or number < 1:
            raise PermanentError(f"not an upload of this store: {upload_id!r} part {number}")
        target = self._path(key)
        return target.with_name(f".{target.name}.{upload_id}.{number}{_TMP_SUFFIX}")

    def start_multipart(self, key: str) -> str:
        self._path(key).parent.mkdir(parents=True, exist_ok=True)
        return uuid.uuid4().hex

    def put_part(self, key: str, upload_id: str, number: int, data: bytes, sha256: bytes | None = None) -> str:
        _write_atomically(self._part(key, upload_id, number), lambda f: f.write(data))
        return hashlib.md5(data, usedforsecurity=False).hexdigest()

    def complete_multipart(self, key: str, upload_id: str, etags: builtins.list[str]) -> None:
        parts = [self._part(key, upload_id, n) for n in range(1, len(etags) + 1)]
        missing = [str(p) for p in parts if not p.is_file()]
        if missing or not parts:
            raise PermanentError(f"multipart upload {upload_id} of {key!r}: parts missing ({len(missing)} of {len(parts)})")

        def join(f: BinaryIO) -> None:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, f, 1024 * 1024)

        _write_atomically(self._path(key), join)
        self.abort_multipart(key, upload_id)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        target = self._path(key)
        self._part(key, upload_id, 1)  # checks the id
        for part in target.parent.glob(f".{glob.escape(target.name)}.{upload_id}.*{_TMP_SUFFIX}"):
            part.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        # Empty folders are left behind on purpose: removing them would race a
        # concurrent writer that has just created the folder for a new file.
        self._path(key).unlink(missing_ok=True)

    # -- reads ----------------------------------------------------------------

    @contextmanager
    def _reading(self, key: str) -> Iterator[int]:
        """A descriptor open on ``key``'s file; :class:`NotFound` if there is none (or a folder)."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise NotFound(key) from e
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise NotFound(key)
            yield fd
        finally:
            os.close(fd)

    def get_bytes(self, key: str) -> bytes:
        with self._reading(key) as fd, open(fd, "rb", closefd=False) as src:
            return src.read()

    def get_file(self, key: str, path: Path) -> None:
        with self._reading(key) as fd, open(fd, "rb", closefd=False) as src:
            _write_atomically(Path(path), lambda f: shutil.copyfileobj(src, f, 1024 * 1024))

    def get_range(self, key: str, offset: int, length: int) -> tuple[bytes, int]:
        with self._reading(key) as fd:
            return os.pread(fd, length, offset), os.fstat(fd).st_size

    def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        with self._reading(key) as fd:
            size = os.fstat(fd).st_size
            start = max(size - max(length, 0), 0)
            return os.pread(fd, size - start, start), size

    def get_range_into(self, key: str, offset: int, length: int, fd: int) -> tuple[int, int]:
        with self._reading(key) as src:
            written, end = 0, offset + length
            while offset + written < end:
                data = os.pread(src, min(1 << 20, end - offset - written), offset + written)
                if not data:
                    break
                written += os.pwrite(fd, data, offset + written)
            return written, os.fstat(src).st_size

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        # Walk only the deepest folder the prefix names; then filter by string
        # prefix, as S3 does, so "a/b" matches "a/b2/x" but "a/b/" does not.
        folder = self.root.joinpath(*prefix.split("/")[:-1]) if "/" in prefix else self.root
        # is_dir first: most listings are of a folder not made yet (a trial's
        # checkpoints at its first start), and resolve() costs a call per component.
        if not folder.is_dir() or not folder.resolve().is_relative_to(self.root):
            return []
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(folder):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                if name.endswith(_TMP_SUFFIX):
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        out = []
        for key in self.list(prefix):
            try:
                st = self.root.joinpath(*key.split("/")).stat()
            except FileNotFoundError:
                continue  # deleted since the walk
            out.append(ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, timezone.utc)))
        return out

    def uri(self, key: str) -> str:
        # A folder prefix ("…/000000000010/") is allowed and keeps its slash.
        if key.endswith("/") and len(key) > 1:
            return self._path(key.rstrip("/")).as_uri() + "/"
        return self._path(key).as_uri()


def _write_atomically(target: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write via a temp file in ``target``'s folder, fsync, then rename over it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
