"""Token files shared by every trial on a node, and the batches read from them.

A token file is a flat array of byte tokens (uint8) on disk, memory-mapped
read-only: many trials on one node share the page cache instead of each
loading a copy, and a DataLoader worker maps it again rather than receiving
a pickled copy. The built-in corpus is written once per data directory, to a
temp file that is renamed into place under a lock, so trials that start
together neither see half a file nor all build it. A ``--data`` text file is
mapped as it is: with byte-level tokens its bytes are the tokens.

Batches are a pure function of (seed, step) (:class:`TrainWindows`): a resumed run reads exactly
the batches it would have read.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from spotsweep.trainer import corpus
from spotsweep.trainer.checkpoint import write_atomically
from spotsweep.trainer.errors import SetupError

VAL_FRACTION = 0.1  # the last 10% of the tokens are the validation split
EVAL_SEED = 0x5EED  # validation windows are the same for every run seed, so val_loss compares across trials


def default_data_dir() -> Path:
    """``$SPOTSWEEP_HOME/data`` (``~/.spotsweep/data`` by default), shared by the trials on a node."""
    home = os.environ.get("SPOTSWEEP_HOME", "").strip()
    return (Path(home) if home else Path.home() / ".spotsweep") / "data"


def ensure_file(directory: Path, name: str, build: Callable[[], bytes]) -> Path:
    """``directory/name``, built by ``build`` if missing: atomically, and once even under a race."""
    path = directory / name
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second trial waits here, then finds the file
        if path.exists():
            return path
        write_atomically(path, lambda f: f.write(build()), mode=0o444)  # read-only: shared by every trial on the node
    return path


def corpus_file(data_dir: Path | None = None) -> Path:
    """The built-in corpus's token file in the shared data directory."""
    return ensure_file(data_dir or default_data_dir(), corpus.name(), corpus.build)


class TokenFile:
    """A read-only memory map of a token file; cheap to pickle (it maps again after unpickling)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.size = self.path.stat().st_size
        self._tokens: np.ndarray | None = None

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._tokens

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "_tokens": None}

    def split(self) -> tuple[int, int]:
        """Start of the validation split, and the end of the file: [0, cut) trains, [cut, size) validates."""
        return int(self.size * (1 - VAL_FRACTION)), self.size

    def windows(self, starts: np.ndarray, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets for windows of ``length`` tokens starting at ``starts``."""
        rows = np.stack([self.tokens[s : s + length + 1] for s in starts.tolist()])  # copies the batch only
        rows_t = torch.from_numpy(rows.astype(np.int64))
        return rows_t[:, :-1], rows_t[:, 1:]


def check_size(tokens: TokenFile, seq_len: int, what: str) -> None:
    """Both splits must hold at least one window; raise SetupError naming the file otherwise."""
    cut, end = tokens.split()
    if min(cut, end - cut) <= seq_len + 1:
        need = int((seq_len + 2) / VAL_FRACTION) + 1
        raise SetupError(f"{what} {tokens.path} has {tokens.size} bytes; seq_len {seq_len} needs at least {need}")


class TrainWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``dataset[step]``: the step's whole effective batch of random training windows.

    The windows depend on (seed, step) only: no data state to checkpoint, and
    the split into accumulation micro-batches does not change which windows
    a step sees.
    """

    def __init__(self, tokens: TokenFile, seq_len: int, batch: int, seed: int) -> None:
        self.tokens, self.seq_len, self.batch, self.seed = tokens, seq_len, batch, seed
        self.high = tokens.split()[0] - seq_len - 1  # last valid start in the training split

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.Generator(np.random.PCG64([self.seed, step]))
        return self.tokens.windows(rng.integers(0, self.high, size=self.batch), self.seq_len)

    def __len__(self) -> int:  # steps are indexed from 1; the sampler decides which are read
        return 2**62


class ValWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``dataset[i]``: the i-th micro-batch of the fixed validation windows."""

    def __init__(self, tokens: TokenFile, seq_len: int, count: int, batch: int) -> None:
        cut, end = tokens.split()
        rng = np.random.Generator(np.random.PCG64(EVAL_SEED))
        self.starts = np.sort(rng.integers(cut, end - seq_len - 1, size=count))
        self.tokens, self.seq_len, self.batch = tokens, seq_len, batch

    def __len__(self) -> int:
        return -(-len(self.starts) // self.batch)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens.windows(self.starts[i * self.batch : (i + 1) * self.batch], self.seq_len)


def loader_settings(device_type: str, num_workers: int | None) -> dict[str, Any]:
    """DataLoader settings for ``device_type``; ``num_workers`` None picks the default.

    On the CPU the default is 0 workers: reading a batch from a memory map
    takes microseconds, and a worker process would cost start-up time and
    compete for the one or two cores each of the side-by-side trials gets.
    On a GPU two workers overlap batch preparation with the step, and pinned
    memory makes the host-to-device copy asynchronous.
    """
    workers = (2 if device_type == "cuda" else 0) if num_workers is None else num_workers
    return {
        "num_workers": workers,
        "pin_memory": device_type == "cuda",
        # Keeps eval workers alive between evaluations instead of forking new ones each time.
        "persistent_workers": workers > 0,
        "prefetch_factor": 2 if workers > 0 else None,
        "worker_init_fn": ignore_sigterm if workers > 0 else None,
    }


def ignore_sigterm(worker_id: int) -> None:
    """Workers leave SIGTERM to the main process.

    The agent signals the trial's whole process group. A worker killed by it
    would make the main process raise "DataLoader worker exited unexpectedly"
    mid-step, before it could write the checkpoint the signal asks for; the
    workers exit with the main process anyway.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _own_generator() -> torch.Generator:
    # Each new DataLoader iterator draws a seed for its workers. From the global
    # generator, that draw would shift the dropout stream by one at every
    # evaluation and after every resume, so exact resume would depend on when
    # evaluations happened. Batches never depend on this seed.
    return torch.Generator().manual_seed(0)


def step_batches(dataset: Dataset[Any], first: int, last: int, settings: dict[str, Any]) -> Iterator[Any]:
    """Batches for steps ``first..last``, each the dataset's item at that step."""
    return iter(DataLoader(dataset, batch_size=None, sampler=range(first, last + 1), generator=_own_generator(),
                           **settings))


def eval_loader(dataset: Dataset[Any], settings: dict[str, Any]) -> DataLoader[Any]:
    return DataLoader(dataset, batch_size=None, shuffle=False, generator=_own_generator(), **settings)
