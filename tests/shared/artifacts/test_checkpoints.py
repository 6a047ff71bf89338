"""The checkpoint layout over both adapters: round trips, the LATEST commit
point, pruning, and what a crash mid-upload leaves behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spotsweep.shared.artifacts import LocalArtifactStore, S3ArtifactStore
from spotsweep.shared.artifacts.checkpoints import (
    checkpoint_prefix,
    latest_checkpoint,
    log_key,
    prune_checkpoints,
    restore_checkpoint,
    upload_checkpoint,
    upload_checkpoint_files,
)
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import Settings

SWEEP, TRIAL = "sw1", "tr1"
PREFIX = f"sweeps/{SWEEP}/trials/{TRIAL}/checkpoints/"


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    # Same adapters as the contract suite (a fixture cannot be imported across
    # test modules under --import-mode=importlib without a conftest).
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "store")
    for name, value in request.getfixturevalue("s3_env").items():
        monkeypatch.setenv(name, value)
    return S3ArtifactStore.from_settings(Settings())


def make_checkpoint(root: Path, step: int) -> dict[str, bytes]:
    """A checkpoint folder whose contents depend on ``step``, nested dirs included."""
    files = {
        "model.pt": f"weights@{step}".encode() + os.urandom(64),
        "optim/state.pt": f"adam@{step}".encode(),
        "optim/sched/lr.json": json.dumps({"step": step}).encode(),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def steps_stored(store: ArtifactStore) -> set[int]:
    return {int(k[len(PREFIX) :].split("/")[0]) for k in store.list(PREFIX) if not k.endswith("LATEST")}


def test_layout_keys() -> None:
    assert checkpoint_prefix("s", "t") == "sweeps/s/trials/t/checkpoints/"
    assert log_key("s", "t", 3, "stderr") == "sweeps/s/trials/t/logs/attempt-3/stderr.log"


def test_upload_then_restore_into_a_fresh_dir(store: ArtifactStore, tmp_path: Path) -> None:
    files = make_checkpoint(tmp_path / "ckpt", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "ckpt")
    assert uri == store.uri(f"{PREFIX}000000000010/")
    restored = tmp_path / "fresh" / "dir"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 10
    assert read_tree(restored) == files


def test_latest_names_the_newest(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (10, 20):
        make_checkpoint(tmp_path / f"c{step}", step)
        upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"c{step}")
    assert latest_checkpoint(store, SWEEP, TRIAL) == 20
    pointer = json.loads(store.get_bytes(PREFIX + "LATEST"))
    assert pointer == {"step": 20, "files": ["model.pt", "optim/sched/lr.json", "optim/state.pt"]}
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 20
    assert read_tree(restored) == read_tree(tmp_path / "c20")


def test_keep_prunes_older_steps(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        make_checkpoint(tmp_path / f"c{step}", step)
        upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"c{step}")
    assert steps_stored(store) == {30, 40}
    make_checkpoint(tmp_path / "c50", 50)
    upload_checkpoint(store, SWEEP, TRIAL, 50, tmp_path / "c50", keep=3)
    assert steps_stored(store) == {30, 40, 50}
    upload_checkpoint(store, SWEEP, TRIAL, 60, tmp_path / "c50", keep=1)
    assert steps_stored(store) == {60}
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") == 60


def test_crash_mid_upload_leaves_previous_checkpoint(store: ArtifactStore, tmp_path: Path) -> None:
    step10 = make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    # The node dies after uploading step 20's files, before writing LATEST.
    make_checkpoint(tmp_path / "c20", 20)
    upload_checkpoint_files(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    assert 20 in steps_stored(store)
    assert latest_checkpoint(store, SWEEP, TRIAL) == 10
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 10
    assert read_tree(restored) == step10


def test_crash_mid_upload_then_resume_from_an_older_step(store: ArtifactStore, tmp_path: Path) -> None:
    # Attempt 1 committed 10 and died uploading 20; attempt 2 resumes from 10
    # and commits 15. The uncommitted 20 must neither be restored nor count
    # towards ``keep`` (10 and 15 are the two committed checkpoints).
    make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    make_checkpoint(tmp_path / "c20", 20)
    upload_checkpoint_files(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    step15 = make_checkpoint(tmp_path / "c15", 15)
    upload_checkpoint(store, SWEEP, TRIAL, 15, tmp_path / "c15")
    assert steps_stored(store) >= {10, 15}
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 15
    assert read_tree(restored) == step15


def test_restore_fetches_only_the_files_latest_names(store: ArtifactStore, tmp_path: Path) -> None:
    # A stray file in the step folder (left by an earlier, dead upload of the
    # same step) is not part of the committed checkpoint.
    files = make_checkpoint(tmp_path / "c10", 10)
    store.put_bytes(f"{PREFIX}000000000010/stray.bin", b"junk")
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    restored = tmp_path / "restored"
    restore_checkpoint(store, SWEEP, TRIAL, restored)
    assert read_tree(restored) == files


def test_no_checkpoint_is_none(store: ArtifactStore, tmp_path: Path) -> None:
    assert latest_checkpoint(store, SWEEP, TRIAL) is None
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") is None
    assert prune_checkpoints(store, SWEEP, TRIAL) == []


def test_trials_do_not_see_each_other(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c", 5)
    upload_checkpoint(store, SWEEP, TRIAL, 5, tmp_path / "c")
    assert latest_checkpoint(store, SWEEP, "other-trial") is None


def test_empty_or_missing_directory_is_refused(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PermanentError):
        upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "empty")
    with pytest.raises(PermanentError):
        upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "missing")
    assert latest_checkpoint(store, SWEEP, TRIAL) == 10


def test_corrupt_or_unsafe_pointer_is_permanent(store: ArtifactStore, tmp_path: Path) -> None:
    store.put_bytes(PREFIX + "LATEST", b"{not json")
    with pytest.raises(PermanentError):
        latest_checkpoint(store, SWEEP, TRIAL)
    store.put_bytes(PREFIX + "LATEST", json.dumps({"step": 1, "files": ["../../escape"]}).encode())
    with pytest.raises(PermanentError):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r" / "inner")
    assert not (tmp_path / "escape").exists()


class _DiesAfter(ArtifactStore):
    """A real store that loses its node after ``uploads`` file uploads: fault
    injection around a real adapter, so upload_checkpoint's own ordering is
    what the test checks."""

    def __init__(self, inner: ArtifactStore, uploads: int) -> None:
        self.inner, self.left = inner, uploads

    def put_file(self, key: str, path: Path) -> str:
        if self.left == 0:
            raise SystemExit("preempted")
        self.left -= 1
        return self.inner.put_file(key, path)

    def put_bytes(self, key: str, data: bytes) -> str:
        if self.left == 0:
            raise SystemExit("preempted")
        return self.inner.put_bytes(key, data)

    def get_bytes(self, key: str) -> bytes:
        return self.inner.get_bytes(key)

    def get_file(self, key: str, path: Path) -> None:
        self.inner.get_file(key, path)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)


@pytest.mark.parametrize("uploads", [0, 1, 2, 3])
def test_preemption_during_upload_checkpoint_keeps_previous(
    store: ArtifactStore, tmp_path: Path, uploads: int
) -> None:
    step10 = make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    make_checkpoint(tmp_path / "c20", 20)  # three files: dies before or after each
    with pytest.raises(SystemExit):
        upload_checkpoint(_DiesAfter(store, uploads), SWEEP, TRIAL, 20, tmp_path / "c20")
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 10
    assert read_tree(restored) == step10
