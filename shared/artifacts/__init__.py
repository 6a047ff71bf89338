"""The artifact store port and its adapters (S3/MinIO and local directory)."""

from __future__ import annotations

from pathlib import Path

from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.settings import Settings

__all__ = ["ArtifactStore", "LocalArtifactStore", "NotFound", "S3ArtifactStore", "open_store"]


def open_store(settings: Settings, local_root: Path | None = None) -> ArtifactStore:
    """The store the settings name: S3 when ``s3_endpoint`` is set, else a
    directory (``local_root``, or ``settings.home / "artifacts"``)."""
    if settings.s3_endpoint:
        return S3ArtifactStore.from_settings(settings)
    return LocalArtifactStore(local_root if local_root is not None else settings.home / "artifacts")
