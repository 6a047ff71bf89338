"""Checkpoint files: atomic, the last k kept, an unreadable newest one skipped for the one before."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch

from spotsweep.trainer.checkpoint import CheckpointDir


def test_keeps_the_last_k_and_no_temp_files(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path, keep_last=2)
    for step in (5, 10, 15, 20):
        ckpts.save(step, {"step": step, "w": torch.full((3,), float(step))})
    assert ckpts.steps() == [15, 20]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000015.pt", "step-000000020.pt"]
    state = ckpts.load_latest()
    assert state is not None and state["step"] == 20 and state["w"][0].item() == 20.0


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpts = CheckpointDir(tmp_path, keep_last=2)
    ckpts.save(1, {"step": 1})
    ckpts.save(2, {"step": 2})
    ckpts.path(2).write_bytes(b"cut short")
    state = ckpts.load_latest()
    assert state == {"step": 1} and "does not load" in capsys.readouterr().err


def test_empty_or_missing_directory_has_no_checkpoint(tmp_path: Path) -> None:
    assert CheckpointDir(tmp_path / "none").load_latest() is None
    (tmp_path / "other.txt").write_text("x")
    assert CheckpointDir(tmp_path).load_latest() is None
    with pytest.raises(ValueError, match="keep_last must be at least 1"):
        CheckpointDir(tmp_path, keep_last=0)


def test_files_load_without_running_pickled_code(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    torch.save({"step": 3, "evil": Path("x")}, ckpts.path(3))  # an arbitrary object: refused by weights_only
    assert ckpts.load_latest() is None
