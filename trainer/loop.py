"""The training loop: one code path for every precision and accumulation setting, exact resume.

``fit(config, build)`` seeds every RNG, builds the task, resumes from the
newest checkpoint in the trial's checkpoint directory if there is one (else
takes the weights of ``init_from``'s newest checkpoint, if given), and
trains to ``config.steps``, reporting through the process contract
(``spotsweep.trial``). It returns how the run ended; the caller maps that to
an exit code. A loss that is not finite raises :class:`Diverged` at once.

Precision and accumulation never branch inside the loop (precision.py): the forward always runs under
``autocast(...)``, backward always goes through the ``GradScaler``, and batch 32 x 2 computes the gradient of batch 64.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

import torch

from spotsweep import trial
from spotsweep.trainer import optim, pretrained, rng
from spotsweep.trainer.checkpoint import CheckpointDir
from spotsweep.trainer.config import TrainConfig, check_resume
from spotsweep.trainer.data import eval_loader, loader_settings, step_batches
from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.early_stopping import StopState, observe, out_of_time
from spotsweep.trainer.precision import (
    Precision, autocast, for_device, grad_scaler, memory_metrics, resolve_device, restore_scaler,
)
from spotsweep.trainer.schedule import lr_at
from spotsweep.trainer.task import Batch, Task, evaluate, micro_batches, to_device

FORMAT = 1  # checkpoint layout version


class Reporter(Protocol):
    """Where metrics and checkpoint lines go: ``spotsweep.trial`` itself, or a test double."""

    def report(self, step: int, **metrics: float) -> None: ...
    def checkpoint_saved(self, step: int) -> None: ...


class Diverged(RuntimeError):
    """The loss became NaN or infinite: the run cannot recover, so it ends at once."""


@dataclass
class StopRequest:
    """Set by SIGTERM; the loop checkpoints and returns at the next step boundary.

    The handler only sets a flag: saving from inside it could catch the model
    half-way through an optimizer step.
    """

    requested: bool = False

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


@dataclass(frozen=True)
class Result:
    step: int
    outcome: Literal["completed", "stopped", "preempted"]  # stopped: early stopping or the time budget
    message: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Run:
    """What one ``fit`` trains with: the task on its device, the optimizer, the checkpoints, the clock."""

    cfg: TrainConfig
    task: Task
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    precision: Precision
    device: torch.device
    ckpts: CheckpointDir
    trajectory: dict[str, Any]
    reporter: Reporter
    val: Any = None
    elapsed: float = 0.0  # training seconds over every attempt, up to the last step
    stop_state: StopState = field(default_factory=StopState)

    def amp(self) -> Any:
        return autocast(self.device, self.precision)

    def evaluate(self) -> dict[str, float]:
        return evaluate(self.task, self.model, self.val, self.device, self.amp)

    def save(self, step: int, stopped: str | None) -> None:
        self.ckpts.save(step, {
            "format": FORMAT, "step": step, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "scaler": self.scaler.state_dict(), "precision": self.precision.name, "rng": rng.capture(),
            # Batches are a function of the step, so the step is the whole data position.
            "data": {"next_step": step + 1, "samples_seen": step * self.cfg.effective_batch},
            "trajectory": self.trajectory, "config": self.cfg.model_dump(mode="json"),
            "early_stop": self.stop_state.to_dict(), "elapsed_s": self.elapsed, "stopped": stopped,
        })
        self.reporter.checkpoint_saved(step)


def fit(cfg: TrainConfig, build: Callable[[], Task], reporter: Reporter = trial,  # type: ignore[assignment]
        stop: StopRequest | None = None, checkpoint_dir: Path | None = None, init_from: Path | None = None) -> Result:
    """Train ``build()``'s task under ``cfg``; see the module docstring."""
    stop = stop or StopRequest()
    run = _setup(cfg, build, reporter, checkpoint_dir)
    saved = run.ckpts.load_latest()
    start = _resume(saved, run, cfg.amp)
    if saved is None and init_from is not None:  # a resumed run continues itself, not the init
        pretrained.load_weights(init_from, run.model, run.trajectory, run.task.architecture)
    if saved is not None:
        reporter.report(start, resumed_from=start)  # integers in the line: {"step": N, "resumed_from": N}
    _compile(run.model, cfg.compile)
    settings = loader_settings(run.device.type, cfg.num_workers)
    run.val = eval_loader(run.task.val, settings)
    if saved is not None and (saved["stopped"] or start >= cfg.steps):
        # Finished (or stopped early) before this attempt: report the result again and end.
        final = run.evaluate()
        reporter.report(start, **final)
        if saved["stopped"]:
            return Result(start, "stopped", f"already stopped at step {start}: {saved['stopped']}", final)
        return Result(start, "completed", f"already completed {start} steps (its checkpoint); nothing to train", final)

    batches = step_batches(run.task.train, start + 1, cfg.steps, settings)
    clock = _Clock(run.elapsed, cfg.effective_batch * run.task.tokens_per_sample)
    run.model.train()
    metrics: dict[str, float] = {}
    for step in range(start + 1, cfg.steps + 1):
        lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.horizon, cfg.min_lr_ratio)
        metrics = _train_step(run, next(batches), step, lr)
        run.elapsed = clock.tick()
        reason = _observe(run, step, metrics, clock)
        if reason or stop.requested or step % cfg.ckpt_every == 0 or step == cfg.steps:
            run.save(step, reason)
        if stop.requested:
            return Result(step, "preempted", f"SIGTERM: checkpointed step {step}, exiting", metrics)
        if reason:
            return Result(step, "stopped", reason, metrics)
        clock.after(step, cfg)
    return Result(cfg.steps, "completed", f"completed {cfg.steps} steps", metrics)


def _setup(cfg: TrainConfig, build: Callable[[], Task], reporter: Reporter, checkpoint_dir: Path | None) -> _Run:
    """Seed every RNG, then build the task, its model on the device, the optimizer and the scaler."""
    torch.set_num_threads(cfg.threads)
    rng.seed_all(cfg.seed)  # before build(): the model's initial weights come from the seed
    device = resolve_device(cfg.device)
    precision = for_device(device, cfg.amp)
    task = build()
    model = task.model.to(device)
    if cfg.grad_checkpointing:
        enable = getattr(model, "set_grad_checkpointing", None)
        if not callable(enable):
            raise SetupError(f"{type(model).__name__} has no set_grad_checkpointing(); cannot use gradient checkpointing")
        enable(True)
    opt = optim.build(cfg.optimizer, model, cfg.lr, cfg.decay, cfg.betas, cfg.momentum)
    return _Run(cfg, task, model, opt, grad_scaler(device, precision), precision, device,
                CheckpointDir(checkpoint_dir or trial.checkpoint_dir, cfg.keep_last), {**cfg.trajectory(), **task.identity},
                reporter)


def _compile(model: torch.nn.Module, on: bool) -> None:
    if on:
        # The MoE layer picks each expert's tokens with torch.where, whose output shape depends on the
        # data: without this, dynamo breaks the graph there and recompiles during training, which made
        # compiled training slower than eager (bench/trainer.py: 0.40x cold, 1.64x with it, on CPU).
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        model.compile()  # in place: state_dict keys stay those of the plain module


def _train_step(run: _Run, batch: Batch, step: int, lr: float) -> dict[str, float]:
    """One optimizer step at ``lr``: the accumulated gradients, clipped and applied; the step's metrics.
    Raises :class:`Diverged` (after reporting the step) when the loss is not finite."""
    optim.set_lr(run.opt, lr)
    objective, metrics = _accumulate(run, batch)
    if not math.isfinite(objective):
        run.reporter.report(step, **metrics, lr=lr)
        raise Diverged(f"diverged: the loss is {objective} at step {step} (lr {lr:.3g}); "
                       "try a lower --lr or gradient clipping")
    run.scaler.unscale_(run.opt)  # clip the true gradients, not the scaled ones
    max_norm = run.cfg.grad_clip if run.cfg.grad_clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(list(optim.parameters(run.opt)), max_norm)
    run.scaler.step(run.opt)  # skipped by the scaler when fp16 gradients overflowed
    run.scaler.update()
    run.opt.zero_grad(set_to_none=True)
    return {**metrics, "lr": lr, "grad_norm": float(grad_norm)}


class _Clock:
    """Training time over every attempt, and tokens/s over the steps since the last log line
    (training alone: evaluation and checkpoints are not counted)."""

    def __init__(self, resumed: float, tokens_per_step: int) -> None:
        self._resumed, self._tokens_per_step = resumed, tokens_per_step
        self._start = self._window = time.perf_counter()
        self._steps = 0
        self.now = self._start

    def tick(self) -> float:
        """A step ended: the training seconds so far."""
        self._steps += 1
        self.now = time.perf_counter()
        return self._resumed + (self.now - self._start)

    def tokens_per_s(self) -> float:
        return self._steps * self._tokens_per_step / max(self.now - self._window, 1e-9)

    def after(self, step: int, cfg: TrainConfig) -> None:
        """The step's evaluation, report and checkpoint are done: a logged step starts a new window."""
        if step % cfg.eval_every == 0 or step % cfg.log_every == 0:
            self._window, self._steps = time.perf_counter(), 0


def _observe(run: _Run, step: int, metrics: dict[str, float], clock: _Clock) -> str | None:
    """Evaluate and report the step when due; why training stops here (early stopping, the time budget), or None."""
    cfg = run.cfg
    due_eval = step % cfg.eval_every == 0 or step == cfg.steps
    due_log = due_eval or step % cfg.log_every == 0
    out_of_budget = out_of_time(cfg.early_stop, run.elapsed, step)
    if due_log:
        metrics["tokens_per_s"] = clock.tokens_per_s()
    reason = None
    if due_eval or out_of_budget:
        metrics.update(run.evaluate(), **memory_metrics(run.device))
        run.stop_state, reason = observe(cfg.early_stop, run.stop_state, step, metrics)
        _progress(step, cfg.steps, metrics)
    reason = reason or out_of_budget
    if due_log or reason:
        run.reporter.report(step, **metrics)
    return reason


def _resume(saved: dict[str, Any] | None, run: _Run, amp: str) -> int:
    """Load ``saved`` (the newest checkpoint, or None) into the run, training time and early-stop state
    included; its step. Refuses a checkpoint of other trajectory settings. ``--amp auto`` may resolve to
    another precision on the new node: allowed, like any change of device, and said on stderr."""
    if saved is None:
        if trial.resume_step is not None:
            print(f"warning: SPOTSWEEP_RESUME_STEP={trial.resume_step} but no checkpoint in {run.ckpts.directory}; "
                  "starting from step 0", file=sys.stderr)
        return 0
    # Named by its file, not the attempt's own folder: two attempts refused alike read alike (one error to the planner).
    where = run.ckpts.path(saved["step"])
    check_resume(saved["trajectory"], run.trajectory, f"{where.name} (the run's checkpoint)")
    run.model.load_state_dict(saved["model"])
    run.opt.load_state_dict(saved["optimizer"])
    loaded = restore_scaler(run.scaler, saved["scaler"])
    written_in, precision = saved.get("precision"), run.precision  # absent in checkpoints from before it was recorded
    if written_in is not None and written_in != precision.name:
        fresh = " with a fresh GradScaler" if run.scaler.is_enabled() and not loaded else ""
        print(f"note: {where} was written in {written_in}; --amp {amp} resolves to {precision.name} here, so "
              f"training continues in {precision.name}{fresh} and will not match an uninterrupted run exactly",
              file=sys.stderr)
    rng.restore(saved["rng"])  # last: building and loading must not disturb the restored streams
    run.elapsed, run.stop_state = float(saved["elapsed_s"]), StopState.from_dict(saved["early_stop"])
    return int(saved["step"])


def _accumulate(run: _Run, batch: Batch) -> tuple[float, dict[str, float]]:
    """Forward and backward over the step's micro-batches; the objective and the reported parts, averaged.

    Each micro-batch adds ``loss / grad_accum`` to the gradients: with equal
    micro-batches that is the gradient of the whole batch's mean loss.
    """
    grad_accum = run.cfg.grad_accum
    objective = torch.zeros((), device=run.device)
    parts: dict[str, torch.Tensor] = {}
    for micro in micro_batches(batch, grad_accum):
        micro = to_device(micro, run.device)
        with run.amp():
            loss, values = run.task.loss(run.model, micro)
        run.scaler.scale(loss / grad_accum).backward()
        objective += loss.detach() / grad_accum
        for name, value in values.items():
            parts[name] = parts.get(name, 0) + value.float() / grad_accum
    # One device sync per step, here.
    return float(objective), {name: float(value) for name, value in parts.items()}


def _progress(step: int, steps: int, metrics: dict[str, float]) -> None:
    shown = " ".join(f"{k} {metrics[k]:.4g}" for k in ("loss", "val_loss", "val_acc", "lr", "tokens_per_s") if k in metrics)
    print(f"step {step}/{steps} {shown}", file=sys.stderr, flush=True)
