"""An artifact store that counts the calls made to it, by method: what a test
of "no S3 request" or "no listing" reads (real store underneath, local or S3)."""

from __future__ import annotations

import builtins
from collections import Counter
from pathlib import Path

from spotsweep.shared.artifacts.port import ArtifactStore, ObjectInfo


class CountingStore(ArtifactStore):
    """Every call goes to ``inner``; ``calls`` counts them by method name."""

    def __init__(self, inner: ArtifactStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def total(self) -> int:
        return sum(self.calls.values())

    def put_bytes(self, key: str, data: bytes) -> str:
        self.calls["put_bytes"] += 1
        return self.inner.put_bytes(key, data)

    def put_file(self, key: str, path: Path) -> str:
        self.calls["put_file"] += 1
        return self.inner.put_file(key, path)

    def get_bytes(self, key: str) -> bytes:
        self.calls["get_bytes"] += 1
        return self.inner.get_bytes(key)

    def get_file(self, key: str, path: Path) -> None:
        self.calls["get_file"] += 1
        self.inner.get_file(key, path)

    def list(self, prefix: str) -> builtins.list[str]:
        self.calls["list"] += 1
        return self.inner.list(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        self.calls["list"] += 1
        return self.inner.list_info(prefix)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        self.inner.delete(key)

    def copy(self, source: str, key: str) -> str:
        self.calls["copy"] += 1
        return self.inner.copy(source, key)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)  # no request: a URI is built from the key
