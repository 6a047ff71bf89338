"""The checkpoint layout over both adapters: round trips, the LATEST commit
point, pruning, what a crash mid-upload leaves behind, and two agents writing
the same trial at once (a zombie and the trial's new owner)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

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

SWEEP, TRIAL = "sw1", "tr1"
PREFIX = f"sweeps/{SWEEP}/trials/{TRIAL}/checkpoints/"


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


def folders_stored(store: ArtifactStore) -> set[str]:
    return {k[len(PREFIX) :].split("/")[0] for k in store.list(PREFIX) if not k.endswith("LATEST")}


def steps_stored(store: ArtifactStore) -> set[int]:
    return {int(f.split("-")[0]) for f in folders_stored(store)}


def folder_of(uri: str) -> str:
    """``<step>-<token>`` from the URI upload_checkpoint returns."""
    return uri.rstrip("/").rsplit("/", 1)[1]


def test_layout_keys() -> None:
    assert checkpoint_prefix("s", "t") == "sweeps/s/trials/t/checkpoints/"
    assert log_key("s", "t", 3, "stderr") == "sweeps/s/trials/t/logs/attempt-3/stderr.log"


def test_upload_then_restore_into_a_fresh_dir(store: ArtifactStore, tmp_path: Path) -> None:
    files = make_checkpoint(tmp_path / "ckpt", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "ckpt")
    assert re.fullmatch(r"000000000010-[0-9a-f]{12}", folder_of(uri))
    assert uri == store.uri(f"{PREFIX}{folder_of(uri)}/")
    assert set(store.list(f"{PREFIX}{folder_of(uri)}/")) == {
        f"{PREFIX}{folder_of(uri)}/{name}" for name in ("MANIFEST", *(f"files/{rel}" for rel in files))
    }
    restored = tmp_path / "fresh" / "dir"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 10
    assert read_tree(restored) == files


def test_latest_names_the_newest(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (10, 20):
        make_checkpoint(tmp_path / f"c{step}", step)
        uri = upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"c{step}")
    assert latest_checkpoint(store, SWEEP, TRIAL) == 20
    pointer = json.loads(store.get_bytes(PREFIX + "LATEST"))
    assert pointer == {"step": 20, "folder": folder_of(uri)}
    manifest = json.loads(store.get_bytes(f"{PREFIX}{folder_of(uri)}/MANIFEST"))
    sizes = {rel: len(data) for rel, data in read_tree(tmp_path / "c20").items()}
    hashes = {rel: hashlib.sha256(hashlib.sha256(data).digest()).hexdigest()  # files under 8 MiB: one chunk
              for rel, data in read_tree(tmp_path / "c20").items()}
    assert manifest == {"step": 20, "files": sizes, "hash": "sha256/8MiB-chunks", "hashes": hashes}
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
    # The node dies after uploading step 20's files and MANIFEST, before
    # writing LATEST: LATEST still names 10, whole, and a restore takes it.
    make_checkpoint(tmp_path / "c20", 20)
    upload_checkpoint_files(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    assert 20 in steps_stored(store)
    assert latest_checkpoint(store, SWEEP, TRIAL) == 10
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 10
    assert read_tree(restored) == step10


def test_crash_mid_upload_then_resume_from_an_older_step(store: ArtifactStore, tmp_path: Path) -> None:
    # Attempt 1 committed 10 and died uploading 20 (before LATEST); attempt 2
    # resumes from 10 and commits 15. The uncommitted 20 must not be restored
    # (LATEST names 15) nor count towards ``keep`` (10 and 15 are kept).
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
    # A stray file in the folder (left by anything but this upload) is not
    # part of the committed checkpoint: restore fetches what MANIFEST lists.
    files = make_checkpoint(tmp_path / "c10", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    store.put_bytes(f"{PREFIX}{folder_of(uri)}/files/stray.bin", b"junk")
    store.put_bytes(f"{PREFIX}{folder_of(uri)}/stray.bin", b"junk")
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
    store.put_bytes(PREFIX + "LATEST", json.dumps({"step": 1, "folder": "../../escape"}).encode())
    with pytest.raises(PermanentError):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r" / "inner")
    store.put_bytes(PREFIX + "LATEST", json.dumps({"step": 1, "files": ["../../escape"]}).encode())
    with pytest.raises(PermanentError):  # no "folder": not a pointer of this layout
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r" / "inner")
    assert not (tmp_path / "escape").exists()


class _DiesAfter(ArtifactStore):
    """A real store that loses its node after ``uploads`` file uploads: fault
    injection around a real adapter, so upload_checkpoint's own ordering is
    what the test checks."""

    def __init__(self, inner: ArtifactStore, uploads: int) -> None:
        self.inner, self.left, self.done, self.through = inner, uploads, 0, uploads
        self.lock = threading.Condition()

    def put_file(self, key: str, path: Path) -> str:
        # Uploads run in parallel: the node "dies" only once the uploads that got
        # through are stored, so what is left behind does not depend on timing.
        with self.lock:
            allowed = self.left > 0
            self.left -= allowed
        if not allowed:
            with self.lock:
                self.lock.wait_for(lambda: self.left <= 0 and self.done >= self.through, timeout=30)
            raise SystemExit("preempted")
        uri = self.inner.put_file(key, path)
        with self.lock:
            self.done += 1
            self.lock.notify_all()
        return uri

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


# -- two writers on one trial ---------------------------------------------------


class _Hooked(_DiesAfter):
    """A real store that runs ``action`` once, just before the first write whose
    key ``when`` accepts: the other writer's moves, slotted into this one's."""

    def __init__(self, inner: ArtifactStore, when: Callable[[str], bool], action: Callable[[], object]) -> None:
        super().__init__(inner, uploads=-1)
        self.when, self.action = when, action

    def _maybe(self, key: str) -> None:
        if self.action is not None and self.when(key):
            action, self.action = self.action, None
            action()

    def put_file(self, key: str, path: Path) -> str:
        self._maybe(key)
        return self.inner.put_file(key, path)

    def put_bytes(self, key: str, data: bytes) -> str:
        self._maybe(key)
        return self.inner.put_bytes(key, data)


@pytest.mark.parametrize("a_commits_60_before", ["MANIFEST", "LATEST"])
def test_zombie_prunes_the_new_owners_upload_and_the_trial_still_restores(
    store: ArtifactStore, tmp_path: Path, a_commits_60_before: str
) -> None:
    # The reviewer's interleaving. A (the zombie) committed 10..30; B resumes
    # from 30. A commits 40 and 50. B uploads its step 40; meanwhile A commits
    # 60 and prunes (keep=2: 50 and 60 stay). Then B's upload finishes and
    # writes LATEST naming its own 40, which A's prune deleted, whether B's
    # folder was still uploading (no MANIFEST yet: incomplete, below A's
    # oldest kept step) or complete (not the one LATEST named then).
    #
    # The restore gets A's 60: LATEST is only a hint, its folder is not whole,
    # so the newest complete folder wins. A's 60 is a consistent checkpoint of
    # this same trial (same parameters), and the newest there is. B's 40 no
    # longer exists, and no layout could keep it without A honouring a commit
    # B had not made yet.
    for step in (10, 20, 30):
        make_checkpoint(tmp_path / f"a{step}", step)
        upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"a{step}")
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "b-work") == 30
    for step in (40, 50, 60):
        make_checkpoint(tmp_path / f"a{step}", step)
    upload_checkpoint(store, SWEEP, TRIAL, 40, tmp_path / "a40")
    upload_checkpoint(store, SWEEP, TRIAL, 50, tmp_path / "a50")

    make_checkpoint(tmp_path / "b40", 40)
    b_store = _Hooked(
        store,
        when=lambda key: key.endswith("/" + a_commits_60_before),
        action=lambda: upload_checkpoint(store, SWEEP, TRIAL, 60, tmp_path / "a60"),
    )
    b40 = folder_of(upload_checkpoint(b_store, SWEEP, TRIAL, 40, tmp_path / "b40"))
    assert json.loads(store.get_bytes(PREFIX + "LATEST"))["folder"] == b40  # dangling

    assert latest_checkpoint(store, SWEEP, TRIAL) == 60
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 60
    assert read_tree(restored) == read_tree(tmp_path / "a60")

    # A dies for good; B goes on from its own 40 and commits 50. LATEST names
    # B's folder again and a restore follows it, not A's (newer) 60, which
    # B's prune left alone because it is newer than what B committed.
    b50 = make_checkpoint(tmp_path / "b50", 50)
    upload_checkpoint(store, SWEEP, TRIAL, 50, tmp_path / "b50")
    assert 60 in steps_stored(store)
    restored = tmp_path / "restored-2"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 50
    assert read_tree(restored) == b50


def test_two_writers_of_one_step_get_two_folders_and_restore_takes_one(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    first = make_checkpoint(tmp_path / "first", 20)
    second = make_checkpoint(tmp_path / "second", 20)
    # The second writer's whole upload lands between the first one's files.
    hooked = _Hooked(
        store,
        when=lambda key: key.endswith("/files/optim/sched/lr.json"),
        action=lambda: upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "second"),
    )
    upload_checkpoint(hooked, SWEEP, TRIAL, 20, tmp_path / "first")
    assert len([f for f in folders_stored(store) if f.startswith("000000000020-")]) == 2
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 20
    assert read_tree(restored) == first  # LATEST names the first writer's: it committed last
    assert read_tree(restored) != second


def test_dangling_latest_falls_back_to_the_newest_complete_folder(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (10, 20, 30):
        make_checkpoint(tmp_path / f"c{step}", step)
        uri = upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"c{step}", keep=3)
    for key in store.list(f"{PREFIX}{folder_of(uri)}/"):
        store.delete(key)
    assert latest_checkpoint(store, SWEEP, TRIAL) == 20
    restored = tmp_path / "restored"
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 20
    assert read_tree(restored) == read_tree(tmp_path / "c20")
    # Without any LATEST (first upload died before writing it) the same holds.
    store.delete(PREFIX + "LATEST")
    assert latest_checkpoint(store, SWEEP, TRIAL) == 20
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "restored-2") == 20
    # Nothing complete at all: a fresh start.
    for key in store.list(PREFIX):
        if key.endswith("/MANIFEST"):
            store.delete(key)
    assert latest_checkpoint(store, SWEEP, TRIAL) is None
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "restored-3") is None


def test_restore_never_mixes_two_folders(store: ArtifactStore, tmp_path: Path) -> None:
    # Step 30's folder lost a file (pruned mid-restore, say): its other files,
    # one of which step 20 lacks, must not end up next to step 20's.
    make_checkpoint(tmp_path / "c20", 20)
    step20 = read_tree(tmp_path / "c20")
    make_checkpoint(tmp_path / "c30", 30)
    (tmp_path / "c30" / "only30.bin").write_bytes(b"30")
    upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    uri = upload_checkpoint(store, SWEEP, TRIAL, 30, tmp_path / "c30")
    store.delete(f"{PREFIX}{folder_of(uri)}/files/optim/state.pt")  # fetched after only30.bin
    restored = tmp_path / "restored"
    (restored / "optim").mkdir(parents=True)
    (restored / "mine.txt").write_bytes(b"left alone")
    assert restore_checkpoint(store, SWEEP, TRIAL, restored) == 20
    assert read_tree(restored) == {**step20, "mine.txt": b"left alone"}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".restored")) == []  # no staging left


def test_a_file_of_the_wrong_size_makes_a_folder_unusable(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    make_checkpoint(tmp_path / "c20", 20)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    store.put_bytes(f"{PREFIX}{folder_of(uri)}/files/model.pt", b"truncated")
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") == 10


def test_every_folder_damaged_is_permanent(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    store.delete(f"{PREFIX}{folder_of(uri)}/files/model.pt")
    with pytest.raises(PermanentError):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r")


def test_prune_spares_incomplete_folders_that_may_be_uploads_in_progress(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (10, 20, 30):
        make_checkpoint(tmp_path / f"c{step}", step)
        upload_checkpoint(store, SWEEP, TRIAL, step, tmp_path / f"c{step}")
    assert steps_stored(store) == {20, 30}
    # Incomplete folders (files, no MANIFEST): dead uploads or another writer's
    # still going; which, nobody can tell.
    for step in (25, 35, 45):
        make_checkpoint(tmp_path / f"c{step}", step)
        with pytest.raises(SystemExit):
            upload_checkpoint(_DiesAfter(store, 2), SWEEP, TRIAL, step, tmp_path / f"c{step}")
    make_checkpoint(tmp_path / "c40", 40)
    upload_checkpoint(store, SWEEP, TRIAL, 40, tmp_path / "c40")
    # Kept: 40 and 30. 25 is below the oldest kept, so no resumed writer can
    # still be uploading it; 35 and 45 might be.
    assert steps_stored(store) == {30, 35, 40, 45}
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") == 40


def test_prune_keeps_what_latest_names_even_when_older(store: ArtifactStore, tmp_path: Path) -> None:
    # A uploads 50 and commits it; before A prunes, B commits its 20 (so
    # LATEST names B's folder). A's prune must not take that folder away.
    for step in (20, 30, 40, 50):
        make_checkpoint(tmp_path / f"c{step}", step)
    upload_checkpoint(store, SWEEP, TRIAL, 30, tmp_path / "c30")
    upload_checkpoint(store, SWEEP, TRIAL, 40, tmp_path / "c40")
    a50 = upload_checkpoint_files(store, SWEEP, TRIAL, 50, tmp_path / "c50")
    b20 = folder_of(upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "c20"))
    deleted = prune_checkpoints(store, SWEEP, TRIAL, keep=1, committed=a50)
    assert b20 not in deleted and b20 in folders_stored(store)
    assert steps_stored(store) == {20, 50}  # 30 and 40: older than A's 50, beyond keep
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") == 20


def test_manifest_with_unsafe_or_corrupt_content_is_permanent(store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    manifest = f"{PREFIX}{folder_of(uri)}/MANIFEST"
    store.put_bytes(manifest, json.dumps({"step": 10, "files": {"../../../escape": 3}}).encode())
    with pytest.raises(PermanentError):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r" / "inner")
    assert not (tmp_path / "escape").exists()
    store.put_bytes(manifest, b"{not json")
    with pytest.raises(PermanentError):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r" / "inner")


def test_a_manifest_naming_a_file_and_a_path_under_it_is_a_clear_permanent_error(
        store: ArtifactStore, tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "c10", 10)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    manifest = f"{PREFIX}{folder_of(uri)}/MANIFEST"
    store.put_bytes(manifest, json.dumps({"step": 10, "files": {"a": 1, "a/b": 1}}).encode())
    with pytest.raises(PermanentError, match="names both 'a' and 'a/b'"):
        restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r")


def test_a_folder_with_a_corrupt_manifest_falls_back_to_an_older_intact_one(store: ArtifactStore, tmp_path: Path) -> None:
    files = make_checkpoint(tmp_path / "c10", 10)
    upload_checkpoint(store, SWEEP, TRIAL, 10, tmp_path / "c10")
    make_checkpoint(tmp_path / "c20", 20)
    uri = upload_checkpoint(store, SWEEP, TRIAL, 20, tmp_path / "c20")
    store.put_bytes(f"{PREFIX}{folder_of(uri)}/MANIFEST", json.dumps({"step": 20, "files": {"a": 1, "a/b/c": 1}}).encode())
    assert restore_checkpoint(store, SWEEP, TRIAL, tmp_path / "r") == 10
    assert read_tree(tmp_path / "r") == files
