"""The training loop: one code path for every precision and accumulation setting, exact resume.

``fit(config, build)`` seeds every RNG, builds the task, resumes from the
newest checkpoint in the trial's checkpoint directory if there is one, and
trains to ``config.steps``, reporting through the process contract
(``spotsweep.trial``). It returns how the run ended; the caller maps that to
an exit code. A loss that is not finite raises :class:`Diverged` at once.

Precision and accumulation never branch inside the loop: the forward always
runs under ``autocast(...)`` (a null context in fp32), backward always goes
through the ``GradScaler`` (a pass-through unless fp16), and each of the
``grad_accum`` micro-batches contributes ``loss / grad_accum``, so batch 32 x
2 computes the gradient of batch 64.
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
from spotsweep.trainer import optim, rng
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


def fit(cfg: TrainConfig, build: Callable[[], Task], reporter: Reporter = trial,  # type: ignore[assignment]
        stop: StopRequest | None = None, checkpoint_dir: Path | None = None) -> Result:
    """Train ``build()``'s task under ``cfg``; see the module docstring."""
    stop = stop or StopRequest()
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
    scaler = grad_scaler(device, precision)
    ckpts = CheckpointDir(checkpoint_dir or trial.checkpoint_dir, cfg.keep_last)
    trajectory = {**cfg.trajectory(), **task.identity}

    saved = ckpts.load_latest()
    start, elapsed, stop_state = _resume(saved, ckpts, trajectory, model, opt, scaler, precision, cfg.amp)
    if saved is not None:
        reporter.report(start, resumed_from=start)  # integers in the line: {"step": N, "resumed_from": N}
    if cfg.compile:
        # The MoE layer picks each expert's tokens with torch.where, whose output shape depends on the
        # data: without this, dynamo breaks the graph there and recompiles during training, which made
        # compiled training slower than eager (bench/trainer.py: 0.40x cold, 1.64x with it, on CPU).
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        model.compile()  # in place: state_dict keys stay those of the plain module

    settings = loader_settings(device.type, cfg.num_workers)
    val = eval_loader(task.val, settings)

    def amp() -> Any:
        return autocast(device, precision)

    def save(step: int, stopped: str | None) -> None:
        ckpts.save(step, {
            "format": FORMAT, "step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scaler": scaler.state_dict(), "precision": precision.name, "rng": rng.capture(),
            # Batches are a function of the step, so the step is the whole data position.
            "data": {"next_step": step + 1, "samples_seen": step * cfg.effective_batch},
            "trajectory": trajectory, "config": cfg.model_dump(mode="json"), "early_stop": stop_state.to_dict(),
            "elapsed_s": elapsed, "stopped": stopped,
        })
        reporter.checkpoint_saved(step)

    if saved is not None and (saved["stopped"] or start >= cfg.steps):
        # Finished (or stopped early) before this attempt: report the result again and end.
        final = evaluate(task, model, val, device, amp)
        reporter.report(start, **final)
        return Result(start, "stopped" if saved["stopped"] else "completed", saved["stopped"] or "", final)

    params = list(optim.parameters(opt))
    max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    batches = step_batches(task.train, start + 1, cfg.steps, settings)
    tokens_per_step = cfg.effective_batch * task.tokens_per_sample
    model.train()
    resumed_elapsed, loop_start = elapsed, time.perf_counter()
    window_start, window_steps = loop_start, 0
    metrics: dict[str, float] = {}
    for step in range(start + 1, cfg.steps + 1):
        lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.horizon, cfg.min_lr_ratio)
        optim.set_lr(opt, lr)
        objective, metrics = _accumulate(task, model, next(batches), cfg.grad_accum, device, amp, scaler)
        if not math.isfinite(objective):
            reporter.report(step, **metrics, lr=lr)
            raise Diverged(f"diverged: the loss is {objective} at step {step} (lr {lr:.3g}); "
                           "try a lower --lr or gradient clipping")
        scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        scaler.step(opt)  # skipped by the scaler when fp16 gradients overflowed
        scaler.update()
        opt.zero_grad(set_to_none=True)
        window_steps += 1

        now = time.perf_counter()
        elapsed = resumed_elapsed + (now - loop_start)
        due_eval = step % cfg.eval_every == 0 or step == cfg.steps
        due_log = due_eval or step % cfg.log_every == 0
        out_of_budget = out_of_time(cfg.early_stop, elapsed, step)
        metrics.update(lr=lr, grad_norm=float(grad_norm))
        if due_log:
            metrics["tokens_per_s"] = window_steps * tokens_per_step / max(now - window_start, 1e-9)
        reason = None
        if due_eval or out_of_budget:
            metrics.update(evaluate(task, model, val, device, amp), **memory_metrics(device))
            stop_state, reason = observe(cfg.early_stop, stop_state, step, metrics)
            _progress(step, cfg.steps, metrics)
        reason = reason or out_of_budget
        if due_log or reason:
            reporter.report(step, **metrics)
        if reason or stop.requested or step % cfg.ckpt_every == 0 or step == cfg.steps:
            save(step, reason)
        if stop.requested:
            return Result(step, "preempted", f"SIGTERM: checkpointed step {step}, exiting", metrics)
        if reason:
            return Result(step, "stopped", reason, metrics)
        if due_log:  # throughput of training alone: evaluation and checkpoints are not counted
            window_start, window_steps = time.perf_counter(), 0
    return Result(cfg.steps, "completed", f"completed {cfg.steps} steps", metrics)


def _resume(saved: dict[str, Any] | None, ckpts: CheckpointDir, trajectory: dict[str, Any], model: torch.nn.Module,
            opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler, precision: Precision,
            amp: str) -> tuple[int, float, StopState]:
    """Load ``saved`` (the newest checkpoint, or None) into the run; its step, training time and early-stop state.

    Refuses a checkpoint of other trajectory settings. ``--amp auto`` may
    resolve to another precision on the new node (fp32 on a CPU, bf16 or
    fp16 on a GPU): that is allowed, like any change of device, and said on
    stderr; a scaler state is loaded only where there is one to load.
    """
    if saved is None:
        if trial.resume_step is not None:
            print(f"warning: SPOTSWEEP_RESUME_STEP={trial.resume_step} but no checkpoint in {ckpts.directory}; "
                  "starting from step 0", file=sys.stderr)
        return 0, 0.0, StopState()
    where = ckpts.path(saved["step"])
    check_resume(saved["trajectory"], trajectory, str(where))
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    loaded = restore_scaler(scaler, saved["scaler"])
    written_in = saved.get("precision")  # absent in checkpoints from before it was recorded
    if written_in is not None and written_in != precision.name:
        fresh = " with a fresh GradScaler" if scaler.is_enabled() and not loaded else ""
        print(f"note: {where} was written in {written_in}; --amp {amp} resolves to {precision.name} here, so "
              f"training continues in {precision.name}{fresh} and will not match an uninterrupted run exactly",
              file=sys.stderr)
    rng.restore(saved["rng"])  # last: building and loading must not disturb the restored streams
    return int(saved["step"]), float(saved["elapsed_s"]), StopState.from_dict(saved["early_stop"])


def _accumulate(task: Task, model: torch.nn.Module, batch: Batch, grad_accum: int, device: torch.device,
                amp: Callable[[], Any], scaler: torch.amp.GradScaler) -> tuple[float, dict[str, float]]:
    """Forward and backward over the step's micro-batches; the objective and the reported parts, averaged.

    Each micro-batch adds ``loss / grad_accum`` to the gradients: with equal
    micro-batches that is the gradient of the whole batch's mean loss.
    """
    objective = torch.zeros((), device=device)
    parts: dict[str, torch.Tensor] = {}
    for micro in micro_batches(batch, grad_accum):
        micro = to_device(micro, device)
        with amp():
            loss, values = task.loss(model, micro)
        scaler.scale(loss / grad_accum).backward()
        objective += loss.detach() / grad_accum
        for name, value in values.items():
            parts[name] = parts[name] + value.float() / grad_accum if name in parts else value.float() / grad_accum
    # One device sync per step, here.
    return float(objective), {name: float(value) for name, value in parts.items()}


def _progress(step: int, steps: int, metrics: dict[str, float]) -> None:
    shown = " ".join(f"{k} {metrics[k]:.4g}" for k in ("loss", "val_loss", "val_acc", "lr", "tokens_per_s") if k in metrics)
    print(f"step {step}/{steps} {shown}", file=sys.stderr, flush=True)
