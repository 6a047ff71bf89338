"""The tiny language model as a harness :class:`~spotsweep.trainer.task.Task`: model, byte data, objective."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


from spotsweep.trainer import corpus
from spotsweep.trainer.config import TrainConfig
from spotsweep.trainer.data import TokenFile, TrainWindows, ValWindows, check_size, corpus_file
from spotsweep.trainer.models.tinylm import TinyLM, TinyLMConfig
from spotsweep.trainer.models.tinylm_config import ARCHITECTURE
from spotsweep.trainer.task import Task


def fingerprint(path: Path) -> str:
    """A cheap identity of a data file: its size and hashes of its first and last MiB.

    Hashing a many-GB file at every trial start would cost more than it
    protects; a file edited in the middle without changing size is the case
    it misses.
    """
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return f"{path.name}:{size}:{h.hexdigest()[:16]}"


def build(model_cfg: TinyLMConfig, train_cfg: TrainConfig, data: Path | None, data_dir: Path | None,
          eval_windows: int) -> Task:
    """The task; ``data`` None means the built-in corpus (built once in ``data_dir``).

    A step reads ``effective_batch`` training windows; validation runs in
    micro-batches of ``batch_size`` so it fits wherever training does.
    """
    if data is None:
        tokens, source = TokenFile(corpus_file(data_dir)), corpus.name()
    else:
        tokens, source = TokenFile(data), fingerprint(data)
    check_size(tokens, model_cfg.seq_len, "--data" if data is not None else "the built-in corpus")
    identity: dict[str, Any] = {f"model.{k}": v for k, v in model_cfg.model_dump(mode="json").items()}
    identity["data"] = source
    return Task(
        model=TinyLM(model_cfg),
        train=TrainWindows(tokens, model_cfg.seq_len, train_cfg.effective_batch, train_cfg.seed),
        val=ValWindows(tokens, model_cfg.seq_len, eval_windows, train_cfg.batch_size),
        loss=lambda model, batch: model.loss(*batch),  # type: ignore[operator]
        evaluate=lambda model, batch: model.eval_metrics(*batch),  # type: ignore[operator]
        identity=identity,
        tokens_per_sample=model_cfg.seq_len,
        architecture=tuple(f"model.{name}" for name in ARCHITECTURE),
    )
