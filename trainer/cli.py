"""``spotsweep train MODEL [flags]``: a built-in model trained under the trial process contract.

Exit codes (docs/trial-contract.md): 0 when the run completed or stopped
early by its own rules; 1 when it failed (diverged, CUDA out of memory, a
bug), with the reason on the last line of stderr, which the agent records as
the trial's error; 2 for bad flags, a checkpoint written under other
training settings or an --init-from that is missing or of another
architecture; 143 after a SIGTERM, once the checkpoint is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import torch
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from spotsweep.trainer.config import BUDGET, SPEED, TRAJECTORY, EarlyStopConfig, Threshold, TrainConfig
from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.loop import Diverged, StopRequest, fit
from spotsweep.trainer.models import tinylm_task
from spotsweep.trainer.models.tinylm_config import TinyLMConfig

MODELS = ("tinylm",)
PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process killed by it
MODEL = "model"
GROUPS = {TRAJECTORY: "training (changing these on resume is refused)", MODEL: "model (changing these on resume is refused)",
          BUDGET: "budget and cadence (may change on resume)", SPEED: "where and how fast (may change on resume)"}


def _threshold(text: str) -> Threshold:
    try:
        return Threshold.parse(text)
    except (ValueError, ValidationError) as e:
        raise argparse.ArgumentTypeError(str(e).splitlines()[0]) from None


def knobs() -> list[tuple[tuple[str, ...], FieldInfo]]:
    """Every config field that is a flag, by its path in the config: ``("lr",)``,
    ``("early_stop", "patience")``. Fields with a ``description`` are flags."""
    out: list[tuple[tuple[str, ...], FieldInfo]] = []
    for name, field in TrainConfig.model_fields.items():
        if field.annotation is EarlyStopConfig:
            out += [(("early_stop", sub), f) for sub, f in EarlyStopConfig.model_fields.items() if f.description is not None]
        elif field.description is not None:
            out.append(((name,), field))
    return out


def model_knobs() -> dict[str, FieldInfo]:
    """The model's fields that are flags: those with a ``description``."""
    return {name: f for name, f in TinyLMConfig.model_fields.items() if f.description is not None}


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def flag(path: tuple[str, ...], field: FieldInfo) -> str:
    return str(_extra(field).get("flag") or "--" + path[-1].replace("_", "-"))


def _dest(path: tuple[str, ...]) -> str:
    return "__".join(path)


def _add(group: argparse._ArgumentGroup, path: tuple[str, ...], field: FieldInfo) -> None:
    """One flag from one field: its type, default and choices are the field's."""
    kind: Any = field.annotation
    if get_origin(kind) in (Union, UnionType):  # X | None: a flag of X, default None
        kind = next(a for a in get_args(kind) if a is not type(None))
    if get_origin(kind) is Annotated:  # Finite
        kind = get_args(kind)[0]
    helptext = str(field.description).replace("%", "%%")
    if not (field.default is None or field.default is False or field.default == ()) and "default" not in helptext:
        helptext = f"{helptext} (default %(default)s)".lstrip()
    name, dest = flag(path, field), _dest(path)
    if kind is bool:
        group.add_argument(name, dest=dest, action="store_true", default=field.default, help=helptext)
    elif get_origin(kind) is Literal:
        group.add_argument(name, dest=dest, choices=get_args(kind), default=field.default, help=helptext)
    elif get_origin(kind) is tuple:  # thresholds: a repeatable flag of parsed rules
        group.add_argument(name, dest=dest, type=_threshold, action="append", default=[], metavar="METRIC<VALUE@STEP",
                           help=helptext)
    else:
        group.add_argument(name, dest=dest, type=kind, default=field.default, help=helptext,
                           metavar=name.removeprefix("--").replace("-", "_").upper())


def parser() -> argparse.ArgumentParser:
    """The flags; ``(default %(default)s)`` in a help text is argparse's, filled from the config's defaults."""
    p = argparse.ArgumentParser(prog="spotsweep train tinylm",
                                description="Train the tiny DeepSeek-style byte-level language model under the trial contract.")
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for name, field in model_knobs().items():
        _add(groups[MODEL], (name,), field)
    groups[MODEL].add_argument("--data", type=Path, help="a text file to train on, as bytes (default: the built-in corpus)")
    groups[BUDGET].add_argument("--eval-windows", type=int, default=64, help="validation sequences per evaluation (default 64)")
    for path, field in knobs():
        _add(groups[_extra(field)["group"]], path, field)
    groups[SPEED].add_argument("--data-dir", type=Path, help="shared directory of token files (default $SPOTSWEEP_HOME/data)")
    p.add_argument_group("initial weights (ignored on resume: a resumed run continues from its own checkpoint)").add_argument(
        "--init-from", type=Path, metavar="PATH", help="start from the model weights of the newest checkpoint in PATH, a "
        "spotsweep train run's checkpoint folder of the same architecture, with a fresh optimizer and schedule at step 0")
    return p


def _flag(loc: tuple[int | str, ...]) -> str:
    """The flag of a validation error's location (``("early_stop", "patience")`` -> ``--patience``); a model
    field's is its name (the model's flags are its field names), a whole-config error has none."""
    for path, field in knobs():
        if tuple(str(part) for part in loc[:len(path)]) == path:
            return flag(path, field)
    return "--" + str(loc[0]).replace("_", "-") if loc else ""


def _explain(e: ValidationError) -> str:
    """The first problem, naming its flag and value: ``--lr: Input should be greater than 0 (got -1.0)``."""
    err = e.errors()[0]
    flag = _flag(tuple(err["loc"]))
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = f" (got {err['input']!r})" if flag and not isinstance(err.get("input"), dict) else ""
    return f"{flag}: {msg}{got}" if flag else msg


def configs(args: argparse.Namespace) -> tuple[TrainConfig, Any]:
    """Flags to the typed configs; raises ValidationError."""
    # One validation of one mapping: an early-stopping error then carries the early_stop prefix _flag() maps.
    values: dict[str, Any] = {}
    for path, _ in knobs():
        value = getattr(args, _dest(path))
        inner = values.setdefault(path[0], {}) if len(path) > 1 else values
        inner[path[-1]] = tuple(value) if isinstance(value, list) else value
    train = TrainConfig.model_validate(values)
    model = TinyLMConfig(**{name: getattr(args, name) for name in model_knobs()})
    return train, model


def main(argv: list[str]) -> int:
    """``argv`` is what follows ``spotsweep train``."""
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


def _run(train: TrainConfig, model: TinyLMConfig, args: argparse.Namespace, stop: StopRequest) -> int:
    try:
        result = fit(train, lambda: tinylm_task.build(model, train, args.data, args.data_dir, args.eval_windows),
                     stop=stop, init_from=args.init_from)
    except SetupError as e:  # a checkpoint of other settings, too little --data, no such --device, a bad --init-from
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
