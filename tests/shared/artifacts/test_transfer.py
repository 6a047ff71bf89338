"""Checkpoints that need the parallel transfer (shared/artifacts/transfer.py), over both adapters:
files larger than a part, thousands of small files, unchanged files copied from the previous commit
(and still there once that commit is pruned), old manifests without hashes, an upload abandoned midway."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotsweep.shared.artifacts.checkpoints import restore_checkpoint, upload_checkpoint, upload_checkpoint_files
from spotsweep.shared.artifacts import transfer
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.artifacts.transfer import CHUNK
from spotsweep.shared.artifacts.workers import TransferCancelled

SWEEP, TRIAL = "sw1", "tr1"
PREFIX = f"sweeps/{SWEEP}/trials/{TRIAL}/checkpoints/"


def write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def manifest(store: ArtifactStore, uri: str) -> dict[str, Any]:
    folder = uri.rstrip("/").rsplit("/", 1)[1]
    return json.loads(store.get_bytes(f"{PREFIX}{folder}/MANIFEST"))


def counting(store: ArtifactStore, method: str) -> list[str]:
    """The keys ``store.<method>`` is called with from now on (the real call still runs)."""
    calls: list[str] = []
    real: Callable[..., Any] = getattr(store, method)

    def spy(*args: Any) -> Any:
        calls.append(str(args[1] if method == "copy" else args[0]))
        return real(*args)

    setattr(store, method, spy)
    return calls


def test_large_files_go_by_parts_and_come_back_whole(store: ArtifactStore, tmp_path: Path) -> None:
    files = {"model.pt": os.urandom(2 * CHUNK + 12345), "shard/b.bin": os.urandom(CHUNK), "tiny": b"x"}
    upload_checkpoint(store, SWEEP, TRIAL, 5, write(tmp_path / "c5", files))
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 5
    assert read_tree(tmp_path / "back") == files


def test_thousands_of_small_files_round_trip(store: ArtifactStore, tmp_path: Path) -> None:
    files = {f"d{i % 7}/f{i}": bytes([i % 256]) for i in range(500)}
    upload_checkpoint(store, SWEEP, TRIAL, 1, write(tmp_path / "c1", files))
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 1
    assert read_tree(tmp_path / "back") == files


def test_unchanged_files_are_copied_in_the_store_and_survive_pruning(store: ArtifactStore, tmp_path: Path) -> None:
    base = os.urandom(CHUNK + 777)  # a frozen base model
    first = {"base.pt": base, "adapter.pt": os.urandom(300_000), "small.json": b"{}"}
    upload_checkpoint(store, SWEEP, TRIAL, 10, write(tmp_path / "c10", first), keep=1)
    second = {**first, "adapter.pt": os.urandom(300_000)}  # same size, new content
    copies = counting(store, "copy")
    uri = upload_checkpoint(store, SWEEP, TRIAL, 20, write(tmp_path / "c20", second), keep=1)  # prunes step 10
    assert [k.rsplit("/", 1)[1] for k in copies] == ["base.pt"]  # only the unchanged large file
    assert {int(k[len(PREFIX):].split("-")[0]) for k in store.list(PREFIX) if "-" in k} == {20}
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 20
    assert read_tree(tmp_path / "back") == second
    assert set(manifest(store, uri)["hashes"]) == set(second)


def test_an_unchanged_file_hashed_before_is_not_read_again(store: ArtifactStore, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen base model linked into every snapshot (same inode, size, mtime) is copied without
    hashing its gigabytes again; once modified it is hashed, and sent."""
    base = os.urandom(CHUNK + 777)
    c10 = write(tmp_path / "c10", {"base.pt": base, "adapter.pt": os.urandom(300_000)})
    long_ago = time.time() - 60
    os.utime(c10 / "base.pt", (long_ago, long_ago))
    uri10 = upload_checkpoint(store, SWEEP, TRIAL, 10, c10)
    c20 = write(tmp_path / "c20", {"adapter.pt": os.urandom(300_000)})
    os.link(c10 / "base.pt", c20 / "base.pt")  # as the agent's snapshot links the trial's files
    hashed: list[str] = []
    real = transfer._Chunks

    def spy(upload: Any, rel: str, *args: Any) -> Any:
        hashed.append(rel)
        return real(upload, rel, *args)

    monkeypatch.setattr(transfer, "_Chunks", spy)
    copies = counting(store, "copy")
    uri20 = upload_checkpoint(store, SWEEP, TRIAL, 20, c20)
    assert hashed == [] and [k.rsplit("/", 1)[1] for k in copies] == ["base.pt"]
    assert manifest(store, uri20)["hashes"]["base.pt"] == manifest(store, uri10)["hashes"]["base.pt"]
    with open(c20 / "base.pt", "r+b") as f:  # modified in place: a new mtime
        f.write(b"X")
    upload_checkpoint(store, SWEEP, TRIAL, 30, c20)
    assert hashed == ["base.pt"] and [k.rsplit("/", 1)[1] for k in copies[1:]] == ["adapter.pt"]  # base.pt sent
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 30
    assert (tmp_path / "back" / "base.pt").read_bytes() == b"X" + base[1:]


def test_a_checkpoint_after_one_without_hashes_sends_every_file(store: ArtifactStore, tmp_path: Path) -> None:
    files = {"base.pt": os.urandom(400_000)}
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, write(tmp_path / "c10", files))
    old = manifest(store, uri)
    del old["hash"], old["hashes"]  # as uploads before hashes wrote it
    store.put_bytes(f"{PREFIX}{uri.rstrip('/').rsplit('/', 1)[1]}/MANIFEST", json.dumps(old).encode())
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "old") == 10  # still readable
    copies = counting(store, "copy")
    upload_checkpoint(store, SWEEP, TRIAL, 20, write(tmp_path / "c20", files))
    assert copies == []
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 20
    assert read_tree(tmp_path / "back") == files


def test_an_abandoned_upload_commits_nothing_and_the_previous_checkpoint_restores(store: ArtifactStore,
                                                                                   tmp_path: Path) -> None:
    step10 = {"model.pt": os.urandom(1000)}
    upload_checkpoint(store, SWEEP, TRIAL, 10, write(tmp_path / "c10", step10))
    big = write(tmp_path / "c20", {"model.pt": os.urandom(3 * CHUNK), **{f"f{i}": b"y" for i in range(50)}})
    calls = [0]

    def out_of_time() -> bool:  # gives up after a few requests, midway
        calls[0] += 1
        return calls[0] > 5

    with pytest.raises(TransferCancelled):
        upload_checkpoint_files(store, SWEEP, TRIAL, 20, big, cancel=out_of_time)
    assert not [k for k in store.list(PREFIX) if k.startswith(PREFIX + "000000000020") and k.endswith("MANIFEST")]
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 10
    assert read_tree(tmp_path / "back") == step10


def test_a_large_file_shorter_than_its_manifest_says_makes_the_folder_unusable(store: ArtifactStore,
                                                                                tmp_path: Path) -> None:
    upload_checkpoint(store, SWEEP, TRIAL, 10, write(tmp_path / "c10", {"m": b"ok"}))
    uri = upload_checkpoint(store, SWEEP, TRIAL, 20, write(tmp_path / "c20", {"m": os.urandom(2 * CHUNK)}))
    key = f"{PREFIX}{uri.rstrip('/').rsplit('/', 1)[1]}/files/m"
    store.put_bytes(key, os.urandom(CHUNK + 1))  # truncated behind the layout's back
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "back") == 10
    assert read_tree(tmp_path / "back") == {"m": b"ok"}


def test_each_part_hash_handed_to_the_store_is_that_parts_sha256(store: ArtifactStore, tmp_path: Path) -> None:
    # The S3 adapter signs a part with the digest it is handed (moto does not check it; S3 would refuse a wrong one).
    given: list[tuple[bytes, bytes | None]] = []
    real = store.put_part

    def spy(key: str, upload_id: str, number: int, data: bytes, sha256: bytes | None = None) -> str:
        given.append((data, sha256))
        return real(key, upload_id, number, data, sha256)

    store.put_part = spy  # type: ignore[method-assign]
    size = 2 * CHUNK + 99
    upload_checkpoint(store, SWEEP, TRIAL, 1, write(tmp_path / "c1", {"m": os.urandom(size)}))  # hashed as it goes
    upload_checkpoint(store, SWEEP, TRIAL, 2, write(tmp_path / "c2", {"m": os.urandom(size)}))  # hashed first: same size
    assert len(given) == 6
    assert all(sha == hashlib.sha256(data).digest() for data, sha in given)
