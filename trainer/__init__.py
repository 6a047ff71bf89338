"""A torch training harness for trials on preemptible nodes, and a tiny DeepSeek-style model to sweep.

``fit(config, build)`` trains any model given as a :class:`Task` with mixed
precision, gradient accumulation, a pure-function learning-rate schedule,
early stopping, and checkpoints with exact resume, reporting through the
trial contract (``spotsweep.trial``). ``spotsweep train tinylm`` runs the
built-in model (``models/tinylm.py``) with it. See ``docs/trainer.md``.

Ships with the ``worker`` extra (torch, numpy): importing this package
imports torch, which the control plane never does.
"""

from spotsweep.trainer.config import EarlyStopConfig, ResumeMismatch, Threshold, TrainConfig
from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.loop import Diverged, Result, StopRequest, fit
from spotsweep.trainer.task import Task

__all__ = [
    "Diverged", "EarlyStopConfig", "Result", "ResumeMismatch", "SetupError", "StopRequest", "Task", "Threshold",
    "TrainConfig", "fit",
]
