"""What the harness needs from a model and its data, whatever the torch model: a :class:`Task`.

``train[step]`` must be a pure function of the step: the step is then a run's whole data position,
which exact resume relies on; ``identity`` is saved in each checkpoint and compared on resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

Batch = tuple[torch.Tensor, ...]
LossFn = Callable[[nn.Module, Batch], tuple[torch.Tensor, dict[str, torch.Tensor]]]
EvalFn = Callable[[nn.Module, Batch], dict[str, torch.Tensor]]


@dataclass
class Task:
    model: nn.Module
    train: Dataset[Batch]  # train[step] for step >= 1: the step's effective batch, on the CPU
    val: Dataset[Batch]  # val[i]: a validation batch; the same on every call
    loss: LossFn  # (objective to minimise, detached parts to report; "loss" among them)
    evaluate: EvalFn  # per-batch means, e.g. {"val_loss": ..., "val_acc": ...}
    identity: dict[str, Any]  # plain JSON-like values: saved in checkpoints, must match on resume
    tokens_per_sample: int = 1  # for tokens_per_s: a sample is a sequence of this many tokens
    architecture: tuple[str, ...] = ()  # identity keys a checkpoint must match to be loaded by --init-from


def micro_batches(batch: Batch, parts: int) -> list[Batch]:
    """Split an effective batch into ``parts`` equal micro-batches (dim 0)."""
    rows = batch[0].shape[0]
    if rows % parts:
        raise ValueError(f"a batch of {rows} rows does not split into {parts} equal micro-batches")
    chunks = [t.chunk(parts) for t in batch]
    return [tuple(c[i] for c in chunks) for i in range(parts)]


def to_device(batch: Batch, device: torch.device) -> Batch:
    # non_blocking pairs with pinned memory on CUDA; on the CPU it is a no-op.
    return tuple(t.to(device, non_blocking=True) for t in batch)


@torch.no_grad()
def evaluate(task: Task, model: nn.Module, batches: Iterable[Batch], device: torch.device,
             autocast: Callable[[], AbstractContextManager[Any]]) -> dict[str, float]:
    """The task's metrics over all validation batches, weighted by batch size; eval mode (no dropout, no RNG)."""
    was_training = model.training
    model.eval()
    sums: dict[str, float] = {}
    rows = 0
    try:
        for batch in batches:
            batch = to_device(batch, device)
            with autocast():
                values = task.evaluate(model, batch)
            n = batch[0].shape[0]
            rows += n
            for name, value in values.items():
                sums[name] = sums.get(name, 0.0) + float(value) * n
    finally:
        model.train(was_training)
    return {name: total / max(1, rows) for name, total in sums.items()}
