"""Helpers for the trainer tests: a tiny model, an in-process run, a trial subprocess like an agent's.

Models here are a few thousand parameters and runs a few steps, so the whole
trainer test set stays fast on one core; the behaviour under test (resume,
accumulation, stopping rules) does not depend on size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spotsweep.trainer.config import EarlyStopConfig, TrainConfig
from spotsweep.trainer.loop import Result, StopRequest, fit
from spotsweep.trainer.models import tinylm_task
from spotsweep.trainer.models.tinylm import TinyLMConfig

TINY = {"dim": 32, "heads": 2, "layers": 2, "seq_len": 16, "experts": 4, "top_k": 2}
TINY_FLAGS = ["--dim", "32", "--heads", "2", "--layers", "2", "--seq-len", "16", "--batch-size", "8",
              "--eval-windows", "16"]


class Recorder:
    """Stands in for ``spotsweep.trial`` in in-process runs: keeps the lines it would write."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def report(self, step: int, **metrics: float) -> None:
        self.lines.append({"step": step, **metrics})

    def checkpoint_saved(self, step: int) -> None:
        self.lines.append({"checkpoint": step})

    def values(self, name: str) -> list[tuple[int, float]]:
        return [(r["step"], r[name]) for r in self.lines if name in r]


@pytest.fixture()
def recorder() -> type[Recorder]:
    """The Recorder class, for tests that call ``fit`` themselves: ``fit(..., reporter=recorder())``."""
    return Recorder


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


_EARLY_STOP = {"patience": "patience", "min_delta": "min_delta", "thresholds": "thresholds", "time_budget": "max_seconds"}
RunTiny = Callable[..., tuple[Result, Recorder]]


@pytest.fixture()
def run_tiny(data_dir: Path) -> RunTiny:
    """``run_tiny(ckpt, model={...}, stop=None, **train)``: one in-process run of the tiny model.

    ``ckpt`` is its checkpoint directory; ``model`` overrides fields of the
    tiny model, ``train`` fields of the TrainConfig (8 steps, eval every 4)
    or of its early stopping (patience, min_delta, thresholds, time_budget).
    """

    def run(ckpt: Path, model: dict[str, Any] | None = None, stop: StopRequest | None = None,
            **train: Any) -> tuple[Result, Recorder]:
        stop_rules = {_EARLY_STOP[k]: train.pop(k) for k in list(train) if k in _EARLY_STOP}
        cfg = TrainConfig(**{"steps": 8, "eval_every": 4, "ckpt_every": 100, "batch_size": 8, **train},
                          early_stop=EarlyStopConfig(**stop_rules))
        model_cfg = TinyLMConfig(**{**TINY, **(model or {})})
        recorder = Recorder()
        result = fit(cfg, lambda: tinylm_task.build(model_cfg, cfg, None, data_dir, 16), reporter=recorder, stop=stop,
                     checkpoint_dir=ckpt)
        return result, recorder

    return run


def train_flags(ckpt: Path, data_dir: Path, *flags: str) -> tuple[Result, Recorder]:
    """In-process, exactly what ``spotsweep train tinylm TINY_FLAGS flags`` runs (later flags win)."""
    from spotsweep.trainer import cli

    args = cli.parser().parse_args([*TINY_FLAGS, "--data-dir", str(data_dir), *flags])
    train, model = cli.configs(args)
    recorder = Recorder()
    result = fit(train, lambda: tinylm_task.build(model, train, args.data, args.data_dir, args.eval_windows),
                 reporter=recorder, checkpoint_dir=ckpt, init_from=args.init_from)
    return result, recorder


@pytest.fixture()
def run_flags(data_dir: Path) -> RunTiny:
    """``run_flags(ckpt, *flags)``: :func:`train_flags` on the session's data dir."""
    return lambda ckpt, *flags: train_flags(ckpt, data_dir, *flags)


@dataclass(frozen=True)
class Pretrained:
    """A finished ``spotsweep train`` run's checkpoint folder (read-only, as a staged input) and its model flags."""

    folder: Path
    arch: tuple[str, ...]  # the model flags it was trained with
    steps: int


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Pretrained:
    """The tiny model pretrained for 300 steps (about 3 s on one CPU core): weights to fine-tune from."""
    arch = ("--dim", "32", "--layers", "1", "--heads", "2", "--experts", "2", "--top-k", "1", "--seq-len", "32")
    folder = tmp_path_factory.mktemp("pretrained") / "checkpoint"
    result, _ = train_flags(folder, data_dir, *arch, "--steps", "300", "--eval-every", "300", "--lr", "3e-3")
    assert result.outcome == "completed"
    folder.chmod(0o555)
    return Pretrained(folder, arch, 300)


class TrialProcess:
    """``spotsweep train`` as an agent runs it: its env, metrics file and checkpoint directory."""

    def __init__(self, root: Path, data_dir: Path) -> None:
        self.root, self.data_dir = root, data_dir
        self.metrics = root / "metrics.jsonl"
        self.ckpt = root / "checkpoint"
        self.ckpt.mkdir(parents=True)
        self.workdir = root / "work"
        self.workdir.mkdir()

    def env(self, attempt: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
        env.update(SPOTSWEEP_PARAMS="{}", SPOTSWEEP_SWEEP_ID="sweep", SPOTSWEEP_TRIAL_ID=self.root.name,
                   SPOTSWEEP_TRIAL_NAME=self.root.name, SPOTSWEEP_ATTEMPT=str(attempt),
                   SPOTSWEEP_METRICS=str(self.metrics), SPOTSWEEP_CHECKPOINT_DIR=str(self.ckpt),
                   SPOTSWEEP_HOME=str(self.root / "home"))
        return env

    def start(self, *flags: str, attempt: int = 1) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "spotsweep", "train", "tinylm", *TINY_FLAGS, "--data-dir", str(self.data_dir), *flags]
        # its own process group, as the agent starts trials (and signals the whole group)
        return subprocess.Popen(argv, cwd=self.workdir, env=self.env(attempt), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, *flags: str, attempt: int = 1) -> subprocess.CompletedProcess[str]:
        proc = self.start(*flags, attempt=attempt)
        out, err = proc.communicate(timeout=180)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def lines(self) -> list[dict[str, Any]]:
        if not self.metrics.exists():
            return []
        return [json.loads(line) for line in self.metrics.read_text().split("\n")[:-1]]  # whole lines only

    def last(self, name: str) -> Any:
        return [r[name] for r in self.lines() if name in r][-1]


@pytest.fixture()
def trial_process(tmp_path: Path, data_dir: Path) -> Callable[[str], TrialProcess]:
    """``trial_process(name)``: a fresh trial's directories under tmp_path, sharing the session's data dir."""
    return lambda name: TrialProcess(tmp_path / name, data_dir)
