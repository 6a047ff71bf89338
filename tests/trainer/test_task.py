"""The harness with a model of the user's own: any nn.Module, any data that is a function of the step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from spotsweep.trainer import Task, TrainConfig, fit
from spotsweep.trainer.task import micro_batches

W_TRUE = torch.tensor([[2.0], [-3.0], [0.5]])


class Steps(torch.utils.data.Dataset):
    """A regression batch per step, drawn from a generator seeded by the step."""

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(16, 3, generator=torch.Generator().manual_seed(step))
        return x, x @ W_TRUE

    def __len__(self) -> int:
        return 10**9


class Val(torch.utils.data.Dataset):
    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(32, 3, generator=torch.Generator().manual_seed(10**6 + i))
        return x, x @ W_TRUE

    def __len__(self) -> int:
        return 2


def _mse(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = nn.functional.mse_loss(model(batch[0]), batch[1])
    return loss, {"loss": loss.detach()}


def _task() -> Task:
    return Task(model=nn.Linear(3, 1), train=Steps(), val=Val(), loss=_mse,
                evaluate=lambda m, b: {"val_loss": nn.functional.mse_loss(m(b[0]), b[1])}, identity={"model": "linear"})


def test_any_model_trains_and_resumes(tmp_path: Path, recorder) -> None:
    cfg = TrainConfig(steps=60, lr=0.3, optimizer="adam", batch_size=8, grad_accum=2, eval_every=20, ckpt_every=30)
    full = fit(cfg, _task, reporter=recorder(), checkpoint_dir=tmp_path / "a")
    assert full.metrics["val_loss"] < 0.05  # learned the linear map

    short = cfg.model_copy(update={"steps": 30, "lr_horizon": 60})
    fit(short, _task, reporter=recorder(), checkpoint_dir=tmp_path / "b")
    lines = recorder()
    rest = fit(cfg.model_copy(update={"lr_horizon": 60}), _task, reporter=lines, checkpoint_dir=tmp_path / "b")
    assert lines.lines[0] == {"step": 30, "resumed_from": 30}
    assert rest.metrics["val_loss"] == pytest.approx(full.metrics["val_loss"], abs=1e-7)


def test_micro_batches_split_evenly_or_say_why() -> None:
    x, y = torch.arange(8).view(4, 2), torch.arange(4)
    parts = micro_batches((x, y), 2)
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="a batch of 4 rows does not split into 3 equal micro-batches"):
        micro_batches((x, y), 3)
