"""`spotsweep logs --follow` reads only what a log gained since the last poll (ranged
reads), also once the agent cuts the log's front at its bound, over both stores."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from spotsweep.commands import artifacts as artifacts_cli
from spotsweep.commands.artifacts import Seen, read_new
from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.settings import Settings

KEY = "sweeps/s/trials/t/logs/attempt-1/stdout"


def lines(start: int, n: int) -> bytes:
    return b"".join(f"step {i} loss {random.Random(i).random():.6f}\n".encode() for i in range(start, start + n))


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "store")
    env = request.getfixturevalue("s3_env")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return S3ArtifactStore.from_settings(Settings())


class Counting:
    """Counts the bytes ``store`` hands out."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store, self.read = store, 0

    def get_bytes(self, key: str) -> bytes:
        data = self.store.get_bytes(key)
        self.read += len(data)
        return data

    def get_range(self, key: str, offset: int, length: int) -> tuple[bytes, int]:
        data, total = self.store.get_range(key, offset, length)
        self.read += len(data)
        return data, total


def follow(store: ArtifactStore, logs: list[bytes]) -> tuple[bytes, list[int]]:
    """Upload each version of the log in turn, polling after each; what was printed and bytes read per poll."""
    counting, seen, out, reads = Counting(store), None, b"", []
    for log in logs:
        store.put_bytes(KEY, log)
        counting.read = 0
        new, seen = read_new(counting, KEY, seen)  # type: ignore[arg-type]
        out += new
        reads.append(counting.read)
    return out, reads


def test_a_growing_log_is_printed_once_reading_only_what_it_gained(store: ArtifactStore) -> None:
    versions = [lines(0, n) for n in (0, 10, 5000, 5001, 60000)]
    out, reads = follow(store, versions)
    assert out == versions[-1]
    for before, after, read in zip(versions, versions[1:], reads[1:]):
        assert read <= len(after) - len(before) + artifacts_cli.ANCHOR  # not the whole log again


def test_a_log_whose_front_was_cut_goes_on_where_it_was(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts_cli, "WINDOW", 4096)  # so that a few windows are needed below
    full = lines(0, 100000)  # about 2.7 MB
    bound = 200_000
    versions = [full[:150_000], full[200_000 - bound:200_000], full[260_000 - bound:260_000],
                full[len(full) - bound:]]  # the agent keeps the last 200 kB; the last poll missed 2 MB
    out, reads = follow(store, versions)
    # the last poll came after the agent cut past what was shown: what it cut is gone, the rest is shown once
    assert out == full[:260_000] + full[len(full) - bound:]
    assert reads[1] < 60_000 and reads[2] < bound // 2  # what it gained (and, cut, the tail windows), not all of it


def test_a_log_rewritten_without_the_anchor_is_printed_whole_and_an_absent_one_is_not_found(
        store: ArtifactStore) -> None:
    with pytest.raises(NotFound):
        read_new(store, KEY, None)
    store.put_bytes(KEY, b"a" * 10_000)
    _, seen = read_new(store, KEY, None)
    store.put_bytes(KEY, b"b" * 100)
    new, seen = read_new(store, KEY, seen)
    assert new == b"b" * 100 and seen == Seen(100, b"b" * 100)
