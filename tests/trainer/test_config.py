"""Typed run settings: unknown keys refused, and which settings a resume may change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spotsweep.trainer.config import ResumeMismatch, TrainConfig, check_resume


def test_unknown_keys_and_bad_values_are_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TrainConfig(learning_rate=1e-3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="greater than 0"):
        TrainConfig(lr=0)
    with pytest.raises(ValidationError, match="warmup must be shorter than the lr horizon 10"):
        TrainConfig(steps=10, warmup=10)
    with pytest.raises(ValidationError):
        TrainConfig(optimizer="lamb")  # type: ignore[arg-type]


def test_trajectory_resolves_defaults_and_ignores_budget_and_split() -> None:
    base = TrainConfig(steps=100, lr_horizon=1000, batch_size=32, grad_accum=2)
    assert base.trajectory()["lr_horizon"] == 1000 and base.trajectory()["warmup"] == 100
    assert base.trajectory()["weight_decay"] == 0.1  # adamw's default
    same = TrainConfig(steps=1000, lr_horizon=1000, batch_size=16, grad_accum=4, eval_every=3, ckpt_every=7,
                       keep_last=3, threads=2, device="cpu", compile=True, grad_checkpointing=True)
    assert same.trajectory() == base.trajectory()
    assert TrainConfig(steps=100).trajectory()["lr_horizon"] == 100  # a default horizon is the run's length


def test_check_resume_names_every_change_and_hints() -> None:
    saved = TrainConfig(steps=10).trajectory()
    check_resume(saved, TrainConfig(steps=10, eval_every=1).trajectory(), "ckpt")
    with pytest.raises(ResumeMismatch) as e:
        check_resume(saved, TrainConfig(steps=20, seed=3).trajectory(), "ckpt.pt")
    text = str(e.value)
    assert "refusing to resume ckpt.pt" in text
    assert "seed: 0 in the checkpoint, 3 now" in text and "lr_horizon: 10 in the checkpoint, 20 now" in text
    assert "--lr-horizon" in text
    with pytest.raises(ResumeMismatch, match="model.dim: 96 in the checkpoint, 64 now"):
        check_resume({"model.dim": 96}, {"model.dim": 64}, "c")
