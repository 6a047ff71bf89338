"""A training run's settings, typed and checked, and which of them a resumed run may change.

``TrainConfig`` is frozen and rejects unknown keys; it is saved inside every
checkpoint. Its fields fall in two kinds:

- **trajectory** settings decide the numbers the run computes: learning rate
  and its schedule (including the horizon), effective batch, optimizer, decay,
  clipping, seed, precision. A checkpoint refuses to resume under different
  ones: the result would be neither run.
- **budget and cadence** settings may change on resume: ``steps`` (train an
  existing run further, as successive halving does), how often to evaluate,
  checkpoint and log, early stopping, the device, thread and worker counts,
  and how the effective batch is split into accumulation micro-batches (a
  CUDA OOM retry halves ``batch_size`` and doubles ``grad_accum``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.optim import DEFAULT_WEIGHT_DECAY, OptimizerName
from spotsweep.trainer.precision import AmpMode
from spotsweep.trainer.rng import MAX_SEED
from spotsweep.trainer.schedule import default_warmup

Finite = Annotated[float, Field(allow_inf_nan=False)]
_THRESHOLD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>])\s*([^@\s]+)\s*@\s*(\d+)\s*")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# A field with a ``description`` is a ``spotsweep train`` flag (trainer/cli.py makes
# it from the field: type, default, choices, help); the group says where its help
# is listed and whether a resumed run may change it; ``flag`` names a flag that
# is not the field's name.
TRAJECTORY, BUDGET, SPEED = "trajectory", "budget", "speed"


def _knob(group: str, default: Any, description: str, flag: str | None = None, **checks: Any) -> Any:
    """A field that is a flag (see above); ``checks`` are the Field's (``ge=0``...)."""
    return Field(default=default, description=description, json_schema_extra={"group": group, **({"flag": flag} if flag else {})},
                 **checks)


class Threshold(_Frozen):
    """Stop when ``metric`` is on the wrong side of ``value`` at an evaluation at or after ``step``."""

    metric: str = Field(min_length=1)
    op: Literal["<", ">"]
    value: Finite
    step: int = Field(ge=0)

    @classmethod
    def parse(cls, text: str) -> Threshold:
        """``"val_acc<0.3@200"``: stop if val_acc < 0.3 by step 200."""
        m = _THRESHOLD.fullmatch(text)
        if not m:
            raise ValueError(f"expected METRIC<VALUE@STEP or METRIC>VALUE@STEP, e.g. val_acc<0.3@200 (got {text!r})")
        try:
            value = float(m.group(3))
        except ValueError:
            raise ValueError(f"{m.group(3)!r} is not a number (in {text!r})") from None
        return cls(metric=m.group(1), op=m.group(2), value=value, step=int(m.group(4)))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}@{self.step}"


class EarlyStopConfig(_Frozen):
    metric: str = _knob(BUDGET, "val_loss", "metric for --patience", "--early-stop-metric", min_length=1)
    mode: Literal["min", "max"] = _knob(BUDGET, "min", "whether --early-stop-metric improves going down or up", "--early-stop-mode")
    patience: int = _knob(BUDGET, 0, "stop after N evaluations without improvement; 0 = off", ge=0)
    min_delta: Finite = _knob(BUDGET, 0.0, "smallest change that counts as an improvement", ge=0)
    thresholds: tuple[Threshold, ...] = _knob(BUDGET, (), "stop when the rule holds at an evaluation at or after STEP, e.g. "
                                              "'val_acc<0.3@200' (repeatable)", "--stop-if")
    max_seconds: Finite | None = _knob(BUDGET, None, "stop after this many seconds of training, over all attempts",
                                       "--time-budget", gt=0)


class TrainConfig(_Frozen):
    # trajectory
    lr: Finite = _knob(TRAJECTORY, 1e-3, "peak learning rate", gt=0)
    lr_horizon: int | None = _knob(TRAJECTORY, None, "step where the cosine reaches its floor (default: --steps); fix it at "
                                   "the largest budget to resume a run with more --steps", ge=1)
    warmup: int | None = _knob(TRAJECTORY, None, "linear warmup steps (default: 10% of the horizon)", ge=0)
    min_lr_ratio: Finite = _knob(TRAJECTORY, 0.1, "final lr as a fraction of the peak", ge=0, le=1)
    batch_size: int = _knob(TRAJECTORY, 32, "sequences per micro-batch", ge=1)
    grad_accum: int = _knob(TRAJECTORY, 1, "micro-batches per step; the effective batch is batch-size x grad-accum", ge=1)
    optimizer: OptimizerName = _knob(TRAJECTORY, "adamw", "")
    weight_decay: Finite | None = _knob(TRAJECTORY, None, "default 0.1 for adamw, 0 for adam and sgd", ge=0)
    betas: tuple[Finite, Finite] = (0.9, 0.95)  # not a flag
    momentum: Finite = _knob(TRAJECTORY, 0.9, "SGD momentum, Nesterov", ge=0, lt=1)
    grad_clip: Finite = _knob(TRAJECTORY, 1.0, "max gradient norm, 0 = off", ge=0)
    seed: int = _knob(TRAJECTORY, 0, "initial weights, dropout and data order", ge=0, le=MAX_SEED)
    amp: AmpMode = _knob(TRAJECTORY, "auto", "auto: bf16 autocast on CUDA, fp32 on the CPU; fp16 uses a GradScaler")
    # budget and cadence
    steps: int = _knob(BUDGET, 200, "optimizer steps", ge=1)
    eval_every: int = _knob(BUDGET, 10, "evaluate every N steps and at the end", ge=1)
    ckpt_every: int = _knob(BUDGET, 100, "checkpoint every N steps and at the end", ge=1)
    keep_last: int = _knob(BUDGET, 1, "checkpoints kept in the directory", ge=1)
    log_every: int = _knob(BUDGET, 1, "report loss, lr and tokens/s every N steps", ge=1)
    early_stop: EarlyStopConfig = Field(default_factory=EarlyStopConfig)  # its fields are flags
    # where and how fast
    device: str = _knob(SPEED, "auto", "auto (cuda when available), cpu, cuda, cuda:1...")
    compile: bool = _knob(SPEED, False, "torch.compile the model")
    grad_checkpointing: bool = _knob(SPEED, False, "recompute activations in backward: less memory")
    threads: int = _knob(SPEED, 1, "CPU threads (trials run side by side)", ge=1)
    num_workers: int | None = _knob(SPEED, None, "DataLoader workers (default 0 on CPU, 2 on CUDA)", ge=0)

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainConfig:
        if self.warmup is not None and self.warmup >= self.horizon:
            raise ValueError(f"warmup must be shorter than the lr horizon {self.horizon} (got {self.warmup})")
        return self

    @property
    def horizon(self) -> int:
        return self.lr_horizon or self.steps

    @property
    def warmup_steps(self) -> int:
        return default_warmup(self.horizon) if self.warmup is None else self.warmup

    @property
    def effective_batch(self) -> int:
        return self.batch_size * self.grad_accum

    @property
    def decay(self) -> float:
        return DEFAULT_WEIGHT_DECAY[self.optimizer] if self.weight_decay is None else self.weight_decay

    def trajectory(self) -> dict[str, Any]:
        """The settings that decide the numbers, resolved (a default horizon is written as its value)."""
        return {
            "lr": self.lr, "lr_horizon": self.horizon, "warmup": self.warmup_steps, "min_lr_ratio": self.min_lr_ratio,
            "effective_batch": self.effective_batch, "optimizer": self.optimizer, "weight_decay": self.decay,
            "betas": list(self.betas), "momentum": self.momentum if self.optimizer == "sgd" else None,
            "grad_clip": self.grad_clip, "seed": self.seed, "amp": self.amp,
        }


# What the user types for each setting, so a refusal names the flag to fix.
HINTS = {
    "lr_horizon": "the lr horizon defaults to --steps; pass --lr-horizon explicitly to extend a run with more --steps",
    "effective_batch": "--batch-size x --grad-accum may be split differently, but their product must stay the same",
}


class ResumeMismatch(SetupError):
    """A checkpoint was written under different trajectory settings than this run's."""


def check_resume(saved: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Raise :class:`ResumeMismatch` naming every trajectory setting that differs."""
    changed = sorted(k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k))
    if not changed:
        return
    diffs = ", ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {current.get(k)!r} now" for k in changed)
    hints = "".join(f"; {HINTS[k]}" for k in changed if k in HINTS)
    raise ResumeMismatch(
        f"refusing to resume {where}: it was written with other training settings ({diffs}). Only --steps, "
        f"evaluation/checkpoint/log cadence, early stopping, device and speed settings may change on resume{hints}"
    )
