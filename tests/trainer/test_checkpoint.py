"""Checkpoint files: atomic, the last k kept, an unreadable newest one skipped for the one before."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch

from spotsweep.trainer.checkpoint import CheckpointDir
from spotsweep.trainer.config import EarlyStopConfig, Threshold, TrainConfig
from spotsweep.trainer.loop import fit
from spotsweep.trainer.models import tinylm_task
from spotsweep.trainer.models.tinylm import TinyLMConfig


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


def test_every_checkpoint_holds_the_runs_config(tmp_path: Path, data_dir: Path, recorder) -> None:
    cfg = TrainConfig(steps=4, ckpt_every=2, keep_last=5, eval_every=2, batch_size=4, grad_accum=2, lr=3e-3,
                      optimizer="sgd", lr_horizon=10, betas=(0.8, 0.9), seed=7,
                      early_stop=EarlyStopConfig(patience=3, thresholds=(Threshold.parse("val_loss>100@1"),)))
    model = TinyLMConfig(dim=32, heads=2, layers=1, seq_len=16, experts=0)
    fit(cfg, lambda: tinylm_task.build(model, cfg, None, data_dir, 8), reporter=recorder(), checkpoint_dir=tmp_path)
    files = sorted(tmp_path.glob("step-*.pt"))
    assert [p.name for p in files] == ["step-000000002.pt", "step-000000004.pt"]
    for path in files:
        state = torch.load(path, map_location="cpu", weights_only=True)  # plain data: no pickled objects
        assert TrainConfig.model_validate(state["config"]) == cfg
