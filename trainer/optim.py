"""Optimizers by name, with the usual weight-decay grouping.

Weight decay applies to matrices (linear and embedding weights) only, never to
norm gains or biases (nanoGPT, DeepSeek). Each optimizer uses decay with its
own torch meaning: decoupled for AdamW, an L2 term for Adam and SGD; the
default decay is 0.1 for AdamW and 0 for the other two, so ``adam`` and
``adamw`` in a sweep differ the way people expect. Add an optimizer by adding
a builder to ``BUILDERS`` (and its name to ``OptimizerName``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch import nn

OptimizerName = Literal["adam", "adamw", "sgd"]
DEFAULT_WEIGHT_DECAY: dict[str, float] = {"adam": 0.0, "adamw": 0.1, "sgd": 0.0}

Groups = list[dict[str, Any]]


def param_groups(model: nn.Module, weight_decay: float) -> Groups:
    """Two groups: matrices with ``weight_decay``, everything else (norms, biases) without."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


Builder = Callable[[Groups, float, tuple[float, float], float], torch.optim.Optimizer]  # (groups, lr, betas, momentum)
BUILDERS: dict[str, Builder] = {
    "adam": lambda groups, lr, betas, momentum: torch.optim.Adam(groups, lr=lr, betas=betas),
    "adamw": lambda groups, lr, betas, momentum: torch.optim.AdamW(groups, lr=lr, betas=betas),
    "sgd": lambda groups, lr, betas, momentum: torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=momentum > 0),
}


def build(name: str, model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95),
          momentum: float = 0.9) -> torch.optim.Optimizer:
    """Optimizer ``name`` (an :data:`OptimizerName`, as TrainConfig checks it) over :func:`param_groups`."""
    return BUILDERS[name](param_groups(model, weight_decay), lr, betas, momentum)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def parameters(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]
