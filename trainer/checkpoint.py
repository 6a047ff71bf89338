"""Checkpoint files in the trial's checkpoint directory: atomic writes, the last k kept.

Each checkpoint is one file, ``step-<step>.pt``, written to a temp file in the
same directory and renamed into place, so the directory always holds complete
checkpoints only: the agent may upload it at any moment after a checkpoint
line. It uploads the whole directory, so every kept file is uploaded each
time: keep_last 1 (the default) is enough for resuming, more is for inspecting.

Files are read with ``weights_only=True``: a checkpoint restored from shared
storage cannot run code.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

_NAME = re.compile(r"step-(\d+)\.pt")


def write_atomically(path: Path, write: Callable[[IO[bytes]], object], mode: int | None = None) -> None:
    """``write`` a temp file beside ``path``, fsync it (``mode``: then chmod it) and rename it into place:
    a reader sees the whole file or none."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CheckpointDir:
    def __init__(self, directory: Path, keep_last: int = 1) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1 (got {keep_last})")
        self.directory = Path(directory)
        self.keep_last = keep_last

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints here, oldest first."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.fullmatch(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.pt"

    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write ``state`` as the checkpoint of ``step`` (temp file, fsync, rename), then prune."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(step)
        write_atomically(final, lambda f: torch.save(state, f))
        for old in self.steps()[: -self.keep_last]:
            self.path(old).unlink(missing_ok=True)
        return final

    def load_latest(self) -> dict[str, Any] | None:
        """The newest checkpoint that loads, or None when there is none.

        A file that does not load (cut short by a full disk, say) is skipped
        with a warning for the one before it: losing some steps beats losing
        the trial.
        """
        for step in reversed(self.steps()):
            path = self.path(step)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 - any unreadable file is handled the same way
                print(f"warning: checkpoint {path} does not load ({e}); trying an older one", file=sys.stderr)
                continue
            if not isinstance(state, dict) or state.get("step") != step:
                print(f"warning: checkpoint {path} is not a spotsweep.trainer checkpoint; skipped", file=sys.stderr)
                continue
            return state
        return None
