"""The artifact store port: checkpoints and logs by key.

Keys are ``/``-separated relative paths (``sweeps/<sweep>/trials/<trial>/...``).
Adapters: :mod:`.s3` (MinIO or any S3 API) and :mod:`.local` (a directory;
local mode and unit tests). One contract suite runs against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class NotFound(KeyError):
    """The key does not exist."""


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

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; absent keys are fine."""

    @abstractmethod
    def uri(self, key: str) -> str: ...

    def exists(self, key: str) -> bool:
        try:
            self.get_bytes(key)
        except NotFound:
            return False
        return True
