"""The ``store`` fixture of the artifact tests: every test that takes it runs against a
LocalArtifactStore on a temp dir and an S3ArtifactStore on a fresh bucket of the moto S3
server (a real HTTP server on loopback, not a mock), so both adapters must pass it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotsweep.shared.artifacts import LocalArtifactStore, S3ArtifactStore
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.settings import Settings


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "store")
    for name, value in request.getfixturevalue("s3_env").items():
        monkeypatch.setenv(name, value)
    return S3ArtifactStore.from_settings(Settings())
