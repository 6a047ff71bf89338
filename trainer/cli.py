"""``spotsweep train MODEL [flags]``: a built-in model trained under the trial process contract.

Exit codes (docs/trial-contract.md): 0 when the run completed or stopped
early by its own rules; 1 when it failed (diverged, CUDA out of memory, a
bug), with the reason on the last line of stderr, which the agent records as
the trial's error; 2 for bad flags or a checkpoint written under other
training settings; 143 after a SIGTERM, once the checkpoint is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from spotsweep.trainer.config import EarlyStopConfig, Threshold, TrainConfig
from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.optim import OptimizerName
from spotsweep.trainer.precision import AMP_MODES

MODELS = ("tinylm",)
PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process killed by it
_EARLY_STOP_FLAGS = {"metric": "early_stop_metric", "mode": "early_stop_mode", "patience": "patience",
                     "min_delta": "min_delta", "thresholds": "stop_if", "max_seconds": "time_budget"}


def _threshold(text: str) -> Threshold:
    try:
        return Threshold.parse(text)
    except (ValueError, ValidationError) as e:
        raise argparse.ArgumentTypeError(str(e).splitlines()[0]) from None


def _default(name: str) -> Any:
    """``TrainConfig``'s default for ``name``: the flags take their defaults from the config, so they cannot drift."""
    return TrainConfig.model_fields[name].default


def _stop_default(name: str) -> Any:
    return EarlyStopConfig.model_fields[name].default


def parser() -> argparse.ArgumentParser:
    """The flags; ``(default %(default)s)`` in a help text is argparse's, filled from the config's defaults."""
    p = argparse.ArgumentParser(prog="spotsweep train tinylm",
                                description="Train the tiny DeepSeek-style byte-level language model under the trial contract.")
    g = p.add_argument_group("training (changing these on resume is refused)")
    g.add_argument("--lr", type=float, default=_default("lr"), help="peak learning rate (default %(default)s)")
    g.add_argument("--lr-horizon", type=int, default=_default("lr_horizon"),
                   help="step where the cosine reaches its floor (default: --steps); "
                   "fix it at the largest budget to resume a run with more --steps")
    g.add_argument("--warmup", type=int, default=_default("warmup"),
                   help="linear warmup steps (default: 10%% of the horizon)")
    g.add_argument("--min-lr-ratio", type=float, default=_default("min_lr_ratio"),
                   help="final lr as a fraction of the peak (default %(default)s)")
    g.add_argument("--batch-size", type=int, default=_default("batch_size"),
                   help="sequences per micro-batch (default %(default)s)")
    g.add_argument("--grad-accum", type=int, default=_default("grad_accum"),
                   help="micro-batches per step; the effective batch is batch-size x grad-accum (default %(default)s)")
    g.add_argument("--optimizer", choices=get_args(OptimizerName), default=_default("optimizer"),
                   help="(default %(default)s)")
    g.add_argument("--weight-decay", type=float, default=_default("weight_decay"),
                   help="default 0.1 for adamw, 0 for adam and sgd")
    g.add_argument("--momentum", type=float, default=_default("momentum"),
                   help="SGD momentum, Nesterov (default %(default)s)")
    g.add_argument("--grad-clip", type=float, default=_default("grad_clip"),
                   help="max gradient norm, 0 = off (default %(default)s)")
    g.add_argument("--seed", type=int, default=_default("seed"),
                   help="initial weights, dropout and data order (default %(default)s)")
    g.add_argument("--amp", choices=AMP_MODES, default=_default("amp"),
                   help="auto: bf16 autocast on CUDA, fp32 on the CPU; fp16 uses a GradScaler (default %(default)s)")
    m = p.add_argument_group("model (changing these on resume is refused)")
    m.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    m.add_argument("--heads", type=int, default=4, help="attention heads; dim / heads must be even (default 4)")
    m.add_argument("--dim", type=int, default=96, help="model width (default 96)")
    m.add_argument("--seq-len", type=int, default=64, help="context length in bytes (default 64)")
    m.add_argument("--dropout", type=float, default=0.0, help="(default 0)")
    m.add_argument("--experts", type=int, default=4, help="routed experts per MoE layer; 0 = dense model (default 4)")
    m.add_argument("--top-k", type=int, default=2, help="routed experts per token (default 2)")
    m.add_argument("--shared-experts", type=int, default=1, help="experts every token uses (default 1)")
    m.add_argument("--dense-layers", type=int, default=1, help="leading blocks with a dense FFN (default 1)")
    m.add_argument("--expert-hidden", type=int, help="expert FFN width (default: dense width / (top-k + shared))")
    m.add_argument("--aux-loss-weight", type=float, default=0.01, help="weight of the balance loss (default 0.01)")
    m.add_argument("--data", type=Path, help="a text file to train on, as bytes (default: the built-in corpus)")
    b = p.add_argument_group("budget and cadence (may change on resume)")
    b.add_argument("--steps", type=int, default=_default("steps"), help="optimizer steps (default %(default)s)")
    b.add_argument("--eval-every", type=int, default=_default("eval_every"),
                   help="evaluate every N steps and at the end (default %(default)s)")
    b.add_argument("--eval-windows", type=int, default=64, help="validation sequences per evaluation (default 64)")
    b.add_argument("--ckpt-every", type=int, default=_default("ckpt_every"),
                   help="checkpoint every N steps and at the end (default %(default)s)")
    b.add_argument("--keep-last", type=int, default=_default("keep_last"),
                   help="checkpoints kept in the directory (default %(default)s)")
    b.add_argument("--log-every", type=int, default=_default("log_every"),
                   help="report loss, lr and tokens/s every N steps (default %(default)s)")
    b.add_argument("--early-stop-metric", default=_stop_default("metric"),
                   help="metric for --patience (default %(default)s)")
    b.add_argument("--early-stop-mode", choices=get_args(EarlyStopConfig.model_fields["mode"].annotation),
                   default=_stop_default("mode"), help="(default %(default)s)")
    b.add_argument("--patience", type=int, default=_stop_default("patience"),
                   help="stop after N evaluations without improvement; 0 = off")
    b.add_argument("--min-delta", type=float, default=_stop_default("min_delta"),
                   help="smallest change that counts as an improvement")
    b.add_argument("--stop-if", type=_threshold, action="append", default=[], metavar="METRIC<VALUE@STEP",
                   help="stop when the rule holds at an evaluation at or after STEP, e.g. 'val_acc<0.3@200' (repeatable)")
    b.add_argument("--time-budget", type=float, default=_stop_default("max_seconds"),
                   help="stop after this many seconds of training, over all attempts")
    r = p.add_argument_group("where and how fast (may change on resume)")
    r.add_argument("--device", default=_default("device"),
                   help="auto (cuda when available), cpu, cuda, cuda:1... (default %(default)s)")
    r.add_argument("--compile", action="store_true", default=_default("compile"), help="torch.compile the model")
    r.add_argument("--grad-checkpointing", action="store_true", default=_default("grad_checkpointing"),
                   help="recompute activations in backward: less memory")
    r.add_argument("--threads", type=int, default=_default("threads"),
                   help="CPU threads (default %(default)s: trials run side by side)")
    r.add_argument("--num-workers", type=int, default=_default("num_workers"),
                   help="DataLoader workers (default 0 on CPU, 2 on CUDA)")
    r.add_argument("--data-dir", type=Path, help="shared directory of token files (default $SPOTSWEEP_HOME/data)")
    return p


def _flag(loc: tuple[int | str, ...]) -> str:
    head = str(loc[0]) if loc else ""
    if head == "early_stop" and len(loc) > 1:
        head = _EARLY_STOP_FLAGS.get(str(loc[1]), str(loc[1]))
    return "--" + head.replace("_", "-") if head else ""


def _explain(e: ValidationError) -> str:
    """The first problem, naming its flag and value: ``--lr: Input should be greater than 0 (got -1.0)``."""
    err = e.errors()[0]
    flag = _flag(tuple(err["loc"]))
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = f" (got {err['input']!r})" if flag and not isinstance(err.get("input"), dict) else ""
    return f"{flag}: {msg}{got}" if flag else msg


def configs(args: argparse.Namespace) -> tuple[TrainConfig, Any]:
    """Flags to the typed configs; raises ValidationError."""
    from spotsweep.trainer.models.tinylm import TinyLMConfig

    # One validation of one mapping: an early-stopping error then carries the early_stop prefix _flag() maps.
    train = TrainConfig.model_validate({
        "lr": args.lr, "lr_horizon": args.lr_horizon, "warmup": args.warmup, "min_lr_ratio": args.min_lr_ratio,
        "batch_size": args.batch_size, "grad_accum": args.grad_accum, "optimizer": args.optimizer,
        "weight_decay": args.weight_decay, "momentum": args.momentum, "grad_clip": args.grad_clip, "seed": args.seed,
        "amp": args.amp, "steps": args.steps, "eval_every": args.eval_every, "ckpt_every": args.ckpt_every,
        "keep_last": args.keep_last, "log_every": args.log_every, "device": args.device, "compile": args.compile,
        "grad_checkpointing": args.grad_checkpointing, "threads": args.threads, "num_workers": args.num_workers,
        "early_stop": {"metric": args.early_stop_metric, "mode": args.early_stop_mode, "patience": args.patience,
                       "min_delta": args.min_delta, "thresholds": tuple(args.stop_if), "max_seconds": args.time_budget},
    })
    model = TinyLMConfig(
        layers=args.layers, heads=args.heads, dim=args.dim, seq_len=args.seq_len, dropout=args.dropout,
        experts=args.experts, top_k=args.top_k, shared_experts=args.shared_experts, dense_layers=args.dense_layers,
        expert_hidden=args.expert_hidden, aux_loss_weight=args.aux_loss_weight,
    )
    return train, model


def main(argv: list[str]) -> int:
    """``argv`` is what follows ``spotsweep train``."""
    from spotsweep.trainer.loop import StopRequest

    stop = StopRequest().install()  # first: a SIGTERM during start-up still gets a checkpoint at step 1
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: spotsweep train MODEL [flags]; models: {', '.join(MODELS)} "
              "(spotsweep train tinylm --help lists the flags)", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] not in MODELS:
        print(f"error: unknown model {argv[0]!r} (available: {', '.join(MODELS)})", file=sys.stderr)
        return 2
    args = parser().parse_args(argv[1:])
    if args.eval_windows < 1:
        print(f"error: --eval-windows: must be at least 1 (got {args.eval_windows})", file=sys.stderr)
        return 2
    if args.data is not None and not args.data.is_file():
        print(f"error: --data: no such file: {str(args.data)!r}", file=sys.stderr)
        return 2
    try:
        train, model = configs(args)
    except ValidationError as e:
        print(f"error: {_explain(e)}", file=sys.stderr)
        return 2
    return _run(train, model, args, stop)


def _run(train: TrainConfig, model: Any, args: argparse.Namespace, stop: Any) -> int:
    import torch

    from spotsweep.trainer.loop import Diverged, fit
    from spotsweep.trainer.models import tinylm_task

    try:
        result = fit(train, lambda: tinylm_task.build(model, train, args.data, args.data_dir, args.eval_windows),
                     stop=stop)
    except SetupError as e:  # a checkpoint of other settings, too little --data, no such --device
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except torch.OutOfMemoryError as e:
        # One line, starting with torch's own "CUDA out of memory": the agent keeps the tail of stderr
        # as the trial's error, and an OOM retry policy recognises it by that text.
        print(" ".join(str(e).split()), file=sys.stderr)
        return 1
    summary = " ".join(f"{k} {result.metrics[k]:.6g}" for k in ("val_loss", "val_acc") if k in result.metrics)
    print(f"{result.message}{': ' + summary if summary else ''}", file=sys.stderr)
    return PREEMPTED if result.outcome == "preempted" else 0
