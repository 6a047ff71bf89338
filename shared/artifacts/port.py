"""The artifact store port: checkpoints and logs by key.

Keys are ``/``-separated relative paths (``sweeps/<sweep>/trials/<trial>/...``).
Adapters: :mod:`.s3` (MinIO or any S3 API) and :mod:`.local` (a directory;
local mode and unit tests). One contract suite runs against both.
"""

from __future__ import annotations

import builtins
import os

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


class NotFound(KeyError):
    """The key does not exist."""


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object as a listing shows it (size and time unknown: None)."""

    key: str
    size: int | None = None
    modified: datetime | None = None
    etag: str | None = None  # the store's version tag of the content (S3's ETag), where it has one


class ArtifactStore(ABC):
    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> str:
        """Store ``data`` under ``key`` (replacing it); return its URI."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> str: ...

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Raise :class:`NotFound` if absent."""

    @abstractmethod
    def get_file(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, sorted."""

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        """Every object under ``prefix`` with its size and time, sorted by key
        (one listing: what the dashboard shows of checkpoints and logs).
        Adapters that cannot tell answer None for those."""
        return [ObjectInfo(key) for key in self.list(prefix)]

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; absent keys are fine."""

    @abstractmethod
    def uri(self, key: str) -> str: ...

    def copy(self, source: str, key: str) -> str:
        """Copy the object ``source`` to ``key`` (replacing it) inside the store; its URI.
        :class:`NotFound` if ``source`` is absent. S3 copies on the server (no byte passes
        through this process); this default reads and writes the bytes."""
        return self.put_bytes(key, self.get_bytes(source))

    def get_range(self, key: str, offset: int, length: int) -> tuple[bytes, int]:
        """Bytes ``offset`` to ``offset + length`` of ``key`` (fewer, or none, past its end)
        and the object's whole size; :class:`NotFound` if absent. This default reads it all."""
        data = self.get_bytes(key)
        return data[offset:offset + length], len(data)

    def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes of ``key`` (all of it when shorter) and the object's whole
        size; :class:`NotFound` if absent: a log's tail without the rest of the log (the
        dashboard's trial page: a log may be 64 MiB). This default reads it all."""
        data = self.get_bytes(key)
        return data[max(len(data) - length, 0):], len(data)

    def get_range_into(self, key: str, offset: int, length: int, fd: int) -> tuple[int, int]:
        """:meth:`get_range` written into the open file ``fd`` at ``offset`` (``os.pwrite``) as it
        arrives: the bytes written and the object's whole size. Adapters that stream a range
        override this (:mod:`.transfer` then fetches a large file's ranges in parallel)."""
        data, total = self.get_range(key, offset, length)
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], offset + written)
        return written, total

    # Multipart uploads: a large file's parts sent in parallel, the object appearing whole
    # only at ``complete_multipart`` (parts numbered from 1; each but the last at least
    # 5 MiB, as S3 asks). Adapters without them leave these as they are: uploads then
    # send the file whole (:mod:`.transfer` checks whether ``start_multipart`` is overridden).

    def start_multipart(self, key: str) -> str:
        """Begin an upload to ``key``; its id."""
        raise NotImplementedError

    def put_part(self, key: str, upload_id: str, number: int, data: bytes, sha256: bytes | None = None) -> str:
        """Store part ``number`` of the upload; its ETag, for :meth:`complete_multipart`.
        ``sha256``: the part's digest when the caller has it (an adapter that signs or
        checks payloads need not hash the bytes again)."""
        raise NotImplementedError

    def complete_multipart(self, key: str, upload_id: str, etags: builtins.list[str]) -> None:
        """Make ``key`` the parts' concatenation, in order (``etags[i]`` is part ``i + 1``'s)."""
        raise NotImplementedError

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop the upload and its parts; ``key`` is left as it was."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        try:
            self.get_bytes(key)
        except NotFound:
            return False
        return True
