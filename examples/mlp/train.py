"""A small MLP classifier on synthetic data: the example trial for spotsweep.

It shows everything a preemptible trial needs, in a script that trains in
about a second on one CPU core:

- hyperparameters as flags (the sweep spec fills them in from params);
- metrics through ``spotsweep.trial.report``; the learning rate is a pure
  function of the step (linear warmup, then cosine over ``--lr-horizon``
  steps), so it needs no state;
- resumable with a larger ``--steps`` (what ASHA's promotions do) when
  ``--lr-horizon`` is given: the schedule then does not move with the budget,
  and a promoted run continues exactly as a long one would have;
- checkpoints every ``--ckpt-every`` steps and on SIGTERM, written to a temp
  file and renamed, then announced with ``trial.checkpoint_saved``;
- exact resume: the data order is a function of the step and the RNG state is
  in the checkpoint, so an interrupted run ends with the same weights as an
  uninterrupted one.

The data are labels from a fixed random "teacher" network, made from a fixed
seed (no downloads); ``--seed`` changes only the student's init and dropout.

Test hooks: ``--fail-at-step K`` exits 1 at step K on attempt 1 only (a retry
then succeeds); ``--sleep S`` sleeps S seconds per step so a test can send
SIGTERM mid-run.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

from spotsweep import trial

DATA_SEED = 1234  # fixed: every trial of a sweep sees the same task
N_FEATURES, N_CLASSES = 16, 4
N_TRAIN, N_VAL = 2048, 512
CHECKPOINT = "checkpoint.pt"
# Flags that change the trajectory: resuming under different ones would silently mix two runs.
# Not --steps: a run may go on to a larger budget, its schedule fixed by lr_horizon.
TRAJECTORY_FLAGS = ("lr", "batch_size", "hidden", "layers", "dropout", "lr_horizon", "seed", "optimizer", "warmup")
HINTS = {"lr_horizon": "--lr-horizon defaults to --steps: give it (the largest --steps) to resume with more --steps"}


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64, help="width of each hidden layer")
    p.add_argument("--layers", type=int, default=2, help="number of hidden layers")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to train to")
    p.add_argument("--lr-horizon", type=positive, default=None,
                   help="step where the cosine reaches its floor (default: --steps); fix it to resume with more --steps")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: 10%% of the lr horizon)")
    p.add_argument("--seed", type=int, default=0, help="model init and dropout seed")
    p.add_argument("--eval-every", type=positive, default=10)
    p.add_argument("--ckpt-every", type=positive, default=20)
    p.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    p.add_argument("--fail-at-step", type=int, default=None, help="test hook: exit 1 at this step on attempt 1")
    p.add_argument("--sleep", type=float, default=0.0, help="test hook: seconds to sleep per step")
    args = p.parse_args(argv)
    if args.lr_horizon is None:
        args.lr_horizon = args.steps
    if args.warmup is None:
        args.warmup = max(1, args.lr_horizon // 10)
    return args


def lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate for optimizer step ``step`` (1-based): linear warmup, then cosine to 10% of peak."""
    if step <= warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs from N(0, 1), labels from a random teacher MLP; identical on every run."""
    g = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(N_TRAIN + N_VAL, N_FEATURES, generator=g)
    w1 = torch.randn(N_FEATURES, 32, generator=g) / math.sqrt(N_FEATURES)
    w2 = torch.randn(32, N_CLASSES, generator=g) / math.sqrt(32)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def batch_indices(step: int, batch_size: int, seed: int) -> torch.Tensor:
    """Rows for step ``step`` (1-based): a function of the step alone, so resume needs no data state.

    The training set is walked in one fixed permutation per epoch; a batch that
    crosses an epoch boundary takes the end of one and the start of the next.
    """
    start, end = (step - 1) * batch_size, step * batch_size
    parts = []
    for epoch in range(start // N_TRAIN, (end - 1) // N_TRAIN + 1):
        perm = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        base = epoch * N_TRAIN
        parts.append(perm[max(start, base) - base : min(end, base + N_TRAIN) - base])
    return torch.cat(parts)


def make_model(args: argparse.Namespace) -> nn.Module:
    layers: list[nn.Module] = []
    width = N_FEATURES
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.ReLU(), nn.Dropout(args.dropout)]
        width = args.hidden
    layers.append(nn.Linear(width, N_CLASSES))
    return nn.Sequential(*layers)


def make_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    if args.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    return torch.optim.Adam(model.parameters(), lr=args.lr)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Validation loss and accuracy; eval mode, so it draws no random numbers."""
    model.eval()
    logits = model(x)
    model.train()
    return nn.functional.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def save_checkpoint(path: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer, config: dict[str, Any]) -> None:
    """Write atomically (temp file + rename), then tell the agent it may upload."""
    state = {
        "step": step,  # also the data position: batch_indices is a function of the step
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "config": config,
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    trial.checkpoint_saved(step)


def load_checkpoint(path: Path, model: nn.Module, opt: torch.optim.Optimizer, config: dict[str, Any]) -> int:
    """Restore everything the next step depends on; returns the step the checkpoint was taken at."""
    state = torch.load(path, weights_only=True)
    saved = state["config"]
    changed = sorted(k for k in saved.keys() | config.keys() if saved.get(k) != config.get(k))
    # The differing keys early (an error is shown cut to its first few hundred characters), and no path:
    # a sweep sees the same refusal on each attempt, and so fails it once instead of retrying it.
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {config.get(k)!r} now" for k in changed)
        hints = "".join(f"; {HINTS[k]}" for k in changed if k in HINTS)
        raise SystemExit(f"refusing to mix runs: the checkpoint was written with other flags ({diffs}){hints}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # One thread: trials run side by side on small machines, and results stay bit-for-bit reproducible.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    stop = {"requested": False}

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        # Only set a flag: saving from inside the handler could catch the model mid-update.
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_sigterm)

    x_train, y_train, x_val, y_val = make_data()
    model = make_model(args)
    opt = make_optimizer(args, model)
    config = {name: getattr(args, name) for name in TRAJECTORY_FLAGS}
    ckpt_path = trial.checkpoint_dir / CHECKPOINT

    step = 0
    if ckpt_path.exists():
        step = load_checkpoint(ckpt_path, model, opt, config)
        trial.report(step, resumed_from=step)
        if step >= args.steps:
            # Finished before the interruption (or a standalone rerun): report the result again and stop.
            val_loss, val_acc = evaluate(model, x_val, y_val)
            trial.report(step, val_loss=val_loss, val_acc=val_acc)
            return 0

    model.train()
    while step < args.steps:
        step += 1
        if args.fail_at_step == step and trial.attempt == 1:
            print(f"injected failure at step {step} (--fail-at-step, attempt 1 only)", file=sys.stderr)
            return 1
        lr = lr_at(step, args.lr, args.warmup, args.lr_horizon)
        for group in opt.param_groups:
            group["lr"] = lr
        idx = batch_indices(step, args.batch_size, args.seed)
        loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

        metrics = {"loss": loss.item(), "lr": lr}
        if step % args.eval_every == 0 or step == args.steps:
            metrics["val_loss"], metrics["val_acc"] = evaluate(model, x_val, y_val)
        trial.report(step, **metrics)

        if args.sleep:
            time.sleep(args.sleep)
        if stop["requested"]:
            save_checkpoint(ckpt_path, step, model, opt, config)
            print(f"SIGTERM: checkpointed step {step}, exiting", file=sys.stderr)
            return 143  # 128 + SIGTERM, what a shell reports for a process killed by it
        if step % args.ckpt_every == 0 or step == args.steps:
            save_checkpoint(ckpt_path, step, model, opt, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
