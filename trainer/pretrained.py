"""Starting a run from another run's weights (``--init-from``): the model of its newest checkpoint, nothing else.

Fine-tuning starts from pretrained weights with a fresh optimizer, schedule and step 0, so only the
checkpoint's ``model`` is taken. ``fit`` calls this only when the run's own checkpoint directory is empty:
a preempted fine-tuning run resumes from its own checkpoint, never from the init again. The folder is
only read: a staged input is read-only and shared by every trial on the node.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from torch import nn

from spotsweep.trainer.checkpoint import CheckpointDir
from spotsweep.trainer.errors import SetupError


class ArchitectureMismatch(SetupError):
    """The checkpoint given to --init-from is of another model shape than this run's."""


def first_difference(theirs: dict[str, Any], ours: dict[str, Any], architecture: tuple[str, ...]) -> str | None:
    """``"dim: 64 in the checkpoint, 32 in this run"`` for the first ``architecture`` key that differs, or None."""
    for key in architecture:
        if theirs.get(key) != ours.get(key):
            return f"{key.removeprefix('model.')}: {theirs.get(key)!r} in the checkpoint, {ours.get(key)!r} in this run"
    return None


def load_weights(path: Path, model: nn.Module, identity: dict[str, Any], architecture: tuple[str, ...]) -> None:
    """Load the model weights of the newest checkpoint in the folder ``path`` into ``model``.

    ``identity`` is this run's (the task's, as saved in checkpoints); ``architecture`` names its keys
    the checkpoint must match. Raises :class:`SetupError` naming ``--init-from`` and the path.
    """
    if not path.is_dir():
        raise SetupError(f"--init-from: no such folder: {str(path)!r} (expected the checkpoint folder of a "
                         "spotsweep train run, holding step-N.pt files)")
    ckpts = CheckpointDir(path)
    saved = ckpts.load_latest()
    if saved is None:
        raise SetupError(f"--init-from: no checkpoint (step-N.pt) in {str(path)!r}")
    where = ckpts.path(saved["step"])
    diff = first_difference(saved.get("trajectory") or {}, identity, architecture)
    if diff:
        raise ArchitectureMismatch(f"--init-from: refusing {where}: it is another architecture ({diff}); the flags that "
                                   "shape the model must be the checkpoint's (dropout and the aux-loss weight may differ)")
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError as e:  # a shape the task's architecture keys do not cover
        raise ArchitectureMismatch(f"--init-from: {where} does not fit this model: {' '.join(str(e).split())}") from None
    print(f"note: initialised from the weights of {where} (step {saved['step']} of its run); "
          "training starts at step 0 with a fresh optimizer and schedule", file=sys.stderr)
