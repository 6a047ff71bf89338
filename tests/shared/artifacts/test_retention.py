"""Checkpoint retention (keep: last | best | all) and reading a trial's artifacts,
on both store adapters (a directory, and moto's S3 server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotsweep.shared.artifacts.browse import NoCheckpoint, download_checkpoint, list_checkpoints, log_tail
from spotsweep.shared.artifacts.checkpoint_layout import checkpoint_prefix, log_key
from spotsweep.shared.artifacts.checkpoints import MANIFEST, latest_checkpoint, restore_checkpoint
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.artifacts import retention
from spotsweep.shared.artifacts.checkpoints import commit_checkpoint, upload_checkpoint_files

S, T = "sw-00000001", "t1"


def save(store: ArtifactStore, tmp: Path, step: int, loss: float | None, keep: retention.Keep = "last",
         mode: str = "min") -> str:
    """What the agent does per checkpoint line: upload, commit, prune as the policy says."""
    src = tmp / f"ckpt-{step}"
    src.mkdir()
    (src / "model.pt").write_bytes(b"w" * (step + 1))
    (src / "opt").mkdir()
    (src / "opt" / "state.pt").write_text(f"step {step}")
    folder = upload_checkpoint_files(store, S, T, step, src, {"loss": loss} if loss is not None else None)
    commit_checkpoint(store, S, T, folder)
    retention.after_commit(store, S, T, folder, keep, "loss", mode)
    return folder


def steps(store: ArtifactStore) -> list[int]:
    return sorted(c.step for c in list_checkpoints(store, S, T) if c.complete)


def test_best_folder_is_the_best_value_newest_first() -> None:
    values = {"000000000001-aa": 3.0, "000000000002-bb": 1.0, "000000000003-cc": 1.0, "000000000004-dd": float("nan"),
              "000000000005-ee": None}
    assert retention.best_folder(values, "min") == "000000000003-cc"
    assert retention.best_folder(values, "max") == "000000000001-aa"
    assert retention.best_folder({"000000000001-aa": None}, "min") is None


@pytest.mark.parametrize("keep, running, ended", [("last", [4, 5], [5]), ("best", [2, 4, 5], [2, 5]),
                                                  ("all", [1, 2, 3, 4, 5], [1, 2, 3, 4, 5])])
def test_policies_while_running_and_at_the_end(store: ArtifactStore, tmp_path: Path, keep: retention.Keep,
                                               running: list[int], ended: list[int]) -> None:
    for step, loss in [(1, 5.0), (2, 1.0), (3, 2.0), (4, 3.0), (5, 4.0)]:
        save(store, tmp_path, step, loss, keep)
    assert steps(store) == running
    retention.at_end(store, S, T, keep, "loss", "min")
    assert steps(store) == ended
    # the latest is always there to resume from, whole
    assert latest_checkpoint(store, S, T) == 5
    assert restore_checkpoint(store, S, T, tmp_path / "restored") == 5


def test_best_with_max_mode_keeps_the_highest(store: ArtifactStore, tmp_path: Path) -> None:
    for step, acc in [(1, 0.5), (2, 0.9), (3, 0.7)]:
        save(store, tmp_path, step, acc, "best", mode="max")
    retention.at_end(store, S, T, "best", "loss", "max")
    assert steps(store) == [2, 3]


def test_pruned_trial_loses_everything(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (1, 2):
        save(store, tmp_path, step, 1.0)
    assert retention.delete_all(store, S, T) > 0
    assert store.list(checkpoint_prefix(S, T)) == []
    assert restore_checkpoint(store, S, T, tmp_path / "r") is None


def test_at_end_never_deletes_the_only_whole_checkpoint(store: ArtifactStore, tmp_path: Path) -> None:
    """A crash mid-deletion leaves the latest folder without its MANIFEST: the end's prune keeps the older whole one."""
    save(store, tmp_path, 1, 1.0, "all")
    latest = save(store, tmp_path, 2, 1.0, "all")
    store.delete(f"{checkpoint_prefix(S, T)}{latest}/{MANIFEST}")
    retention.at_end(store, S, T, "last", "loss", "min")
    assert restore_checkpoint(store, S, T, tmp_path / "r") == 1


def test_download_latest_and_a_step(store: ArtifactStore, tmp_path: Path) -> None:
    for step in (1, 2, 3):
        save(store, tmp_path, step, float(step), "all")
    assert download_checkpoint(store, S, T, tmp_path / "latest") == 3
    assert (tmp_path / "latest" / "model.pt").read_bytes() == b"w" * 4
    assert download_checkpoint(store, S, T, tmp_path / "two", step=2) == 2
    assert (tmp_path / "two" / "opt" / "state.pt").read_text() == "step 2"
    with pytest.raises(NoCheckpoint, match=r"no complete checkpoint at step 7.*steps there are: 1, 2, 3"):
        download_checkpoint(store, S, T, tmp_path / "seven", step=7)
    with pytest.raises(NoCheckpoint, match="has no complete checkpoint"):
        download_checkpoint(store, S, "other", tmp_path / "none")


def test_checkpoint_list_has_steps_sizes_and_times(store: ArtifactStore, tmp_path: Path) -> None:
    save(store, tmp_path, 1, 1.0, "all")
    save(store, tmp_path, 10, 1.0, "all")
    infos = list_checkpoints(store, S, T)
    assert [(c.step, c.size, c.files, c.complete, c.latest) for c in infos] == [
        (10, 11 + len("step 10"), 2, True, True), (1, 2 + len("step 1"), 2, True, False)]
    assert all(c.time is not None for c in infos)


def test_log_tail_keeps_stderr_and_the_end_of_stdout(store: ArtifactStore) -> None:
    assert log_tail(store, S, T).attempt is None
    store.put_bytes(log_key(S, T, 1, "stdout"), b"old\n")
    store.put_bytes(log_key(S, T, 2, "stdout"), "".join(f"line {i}\n" for i in range(500)).encode())
    store.put_bytes(log_key(S, T, 2, "stderr"), b"Traceback\nValueError: \xff\n")
    tail = log_tail(store, S, T, lines=100)
    assert tail.attempt == 2
    assert tail.lines[0] == "==> stdout <==" and tail.lines[-3:] == ["==> stderr <==", "Traceback", "ValueError: \ufffd"]
    assert tail.lines[-4] == "line 499" and len(tail.lines) == 100 + 2
    assert log_tail(store, S, T, attempt=1).lines == ["==> stdout <==", "old"]


def test_log_tail_reads_the_end_of_a_large_log_not_all_of_it(store: ArtifactStore) -> None:
    """A 12 MiB stdout: the tail is its last lines, read from a range of its end (the dashboard
    serves many of these at once), lines cut inside the read are dropped, a huge line is cut."""
    body = "".join(f"line {i:07d} {'x' * 80}\n" for i in range(140_000))
    store.put_bytes(log_key(S, T, 1, "stdout"), body.encode())
    store.put_bytes(log_key(S, T, 1, "stderr"), b"y" * 5_000_000 + b"\n" + b"z" * 5000 + b"\nthe end\n")
    reads: list[int] = []
    get_tail = store.get_tail

    def counted(key: str, length: int) -> tuple[bytes, int]:
        data, size = get_tail(key, length)
        reads.append(len(data))
        return data, size

    store.get_tail = counted  # type: ignore[method-assign]
    tail = log_tail(store, S, T, lines=200)
    assert tail.lines[:2] == ["==> stdout <==", f"line 0139802 {'x' * 80}"]  # 198 + stderr's 2
    assert tail.lines[198] == f"line 0139999 {'x' * 80}"
    assert tail.lines[199:] == ["==> stderr <==", "z" * 2000 + " [...]", "the end"]  # the y line began before the read
    assert max(reads) <= 200 * 1024
