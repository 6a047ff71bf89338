"""The artifact store port: checkpoints and logs by key.

Keys are ``/``-separated relative paths (``sweeps/<sweep>/trials/<trial>/...``).
Adapters: :mod:`.s3` (MinIO or any S3 API) and :mod:`.local` (a directory;
local mode and unit tests). One contract suite runs against both.
"""

from __future__ import annotations

import builtins

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
        """Copy the object ``source`` to ``key`` (replacing it) inside the store;
        return its URI. Raise :class:`NotFound` if ``source`` is absent.

        S3 copies on the server (no byte passes through this process: PBT's
        exploit copies a donor trial's checkpoint this way) and the local store
        copies the file. This default reads and writes the bytes, for adapters
        without a copy of their own."""
        return self.put_bytes(key, self.get_bytes(source))

    def exists(self, key: str) -> bool:
        try:
            self.get_bytes(key)
        except NotFound:
            return False
        return True
