"""``SpotsweepCallback``: a Hugging Face ``Trainer`` script as a complete spotsweep trial (issue 41).

    from spotsweep import trial
    from spotsweep.integrations.transformers import SpotsweepCallback
    args = TrainingArguments(output_dir=str(trial.checkpoint_dir), save_steps=..., ...)
    trainer = Trainer(..., args=args, callbacks=[SpotsweepCallback()])
    trainer.train(resume_from_checkpoint=trial.resume_step is not None)

What it does, on the contract of docs/trial-contract.md:

- **Metrics.** Every ``on_log`` and ``on_evaluate`` is reported at
  ``state.global_step`` (numbers only; strings and the like are skipped; a
  name already reported at that step is not sent again).
- **Checkpoints.** At ``on_save`` the Trainer has written ``checkpoint-N``
  completely: the callback marks it complete (an empty ``.spotsweep-complete``),
  removes every other ``checkpoint-*`` folder but the best model's, whatever
  ``save_total_limit`` says, so the agent uploads one checkpoint, and only then
  writes the checkpoint line. A managed run drops unmarked folders when the
  Trainer is built (a folder the Trainer was writing when the agent snapshotted
  an earlier one), so ``resume_from_checkpoint=True`` finds the newest complete one.
- **SIGTERM.** A handler set at ``on_train_begin`` raises a flag; the next
  ``on_step_end`` asks the Trainer to save and stop, and once it has stopped the
  process exits 143, so code after ``trainer.train()`` (a final evaluation, a
  push) does not run on a preempted attempt.
- **Exact resume.** The Trainer restores the optimizer, scheduler, RNG states
  and step, and the data order is already a function of the seed and epoch
  (accelerate's seedable sampler, ``skip_first_batches`` mid-epoch). What breaks
  in transformers 5.x is the weights: ``save_pretrained`` writes a
  mixture-of-experts model (DeepseekV3) in per-expert keys, and the Trainer's
  resume loads them with ``load_state_dict(strict=False)`` into fused expert
  tensors, silently keeping the fresh initialization. When the checkpoint's
  keys do not match the model's, the callback loads the weights again through
  ``from_pretrained`` (which converts them) at ``on_train_begin``, in place,
  so the optimizer keeps its parameters. It costs one extra model in host
  memory for the time of the load, only on resume and only for such models.
- **Refusals** (``ValueError`` when the Trainer is built, naming the setting):
  settings with which no attempt could resume exactly.
"""

from __future__ import annotations

import json
import numbers
import shutil
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from spotsweep import trial

__all__ = ["COMPLETE_MARKER", "SpotsweepCallback"]

COMPLETE_MARKER = ".spotsweep-complete"
PREEMPTED_EXIT = 143  # 128 + SIGTERM, as a process killed by it
_PREFIX = "checkpoint-"


class SpotsweepCallback(TrainerCallback):
    """Report, checkpoint, stop on SIGTERM and resume exactly, as the module docstring says."""

    def __init__(self) -> None:
        self._sigterm = False
        self._stopping = False
        self._previous_handler: Any = None
        self._reported: dict[str, int] = {}  # metric name -> the last step it was sent at

    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        check_resumable(args)
        if trial.is_managed and args.should_save:
            drop_incomplete(_output_dir(args))

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, **kwargs: Any) -> None:
        folder = _output_dir(args) / f"{_PREFIX}{state.global_step}"
        if state.global_step > 0 and model is not None and folder.is_dir():
            reload_weights_if_partial(model, folder)
        if threading.current_thread() is threading.main_thread():  # Python sets handlers only there
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._sigterm = True  # acted on at the next step boundary, never mid-update

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self._sigterm:
            control.should_save = True
            control.should_training_stop = True
            self._stopping = True

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._report(state, logs or {})

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    metrics: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._report(state, metrics or {})

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = _output_dir(args) / f"{_PREFIX}{state.global_step}"
        (folder / COMPLETE_MARKER).touch()
        best = Path(state.best_model_checkpoint) if state.best_model_checkpoint else None
        for other in _checkpoint_folders(folder.parent):
            if other != folder and (best is None or other.resolve() != best.resolve()):
                shutil.rmtree(other, ignore_errors=True)
        trial.checkpoint_saved(state.global_step)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None
        if self._stopping:
            raise SystemExit(PREEMPTED_EXIT)

    def _report(self, state: TrainerState, values: dict[str, Any]) -> None:
        if not state.is_world_process_zero:
            return
        step = state.global_step
        metrics = {name: value for name, value in values.items()
                   if _is_number(value) and name not in ("step", "checkpoint") and self._reported.get(name) != step}
        if metrics:
            trial.report(step, **metrics)
            self._reported.update(dict.fromkeys(metrics, step))


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_resumable(args: TrainingArguments) -> None:
    """Refuse, naming the setting, what would keep an attempt from resuming exactly where the last one saved."""
    out = _output_dir(args).resolve()
    root = trial.checkpoint_dir.resolve()
    if out != root and root not in out.parents:
        raise ValueError(f"TrainingArguments.output_dir={args.output_dir!r} is outside the trial's checkpoint "
                         f"directory {str(root)!r}: its checkpoints would never be uploaded. "
                         "Use output_dir=str(trial.checkpoint_dir)")
    if str(getattr(args.save_strategy, "value", args.save_strategy)) == "no":
        raise ValueError("TrainingArguments.save_strategy='no' saves no checkpoint: a preempted trial would restart "
                         "from step 0. Use save_strategy='steps' with save_steps")
    if args.save_only_model:
        raise ValueError("TrainingArguments.save_only_model=True leaves the optimizer, scheduler and RNG states out "
                         "of checkpoints: a resumed trial would not continue exactly. Leave it False")
    if args.ignore_data_skip:
        raise ValueError("TrainingArguments.ignore_data_skip=True replays an epoch's first batches after a resume: "
                         "a resumed trial would not continue exactly. Leave it False")
    if not getattr(args.accelerator_config, "use_seedable_sampler", True):
        raise ValueError("TrainingArguments.accelerator_config.use_seedable_sampler=False makes the data order "
                         "depend on the RNG at the start of each epoch, not on the seed: leave it True")


def _output_dir(args: TrainingArguments) -> Path:
    return Path(str(args.output_dir))


def _checkpoint_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.iterdir()
            if p.is_dir() and p.name.startswith(_PREFIX) and p.name[len(_PREFIX):].isdigit()]


def drop_incomplete(root: Path) -> None:
    """Remove ``checkpoint-*`` folders without the marker: written while an upload ran, never announced."""
    for folder in _checkpoint_folders(root):
        if not (folder / COMPLETE_MARKER).exists():
            shutil.rmtree(folder, ignore_errors=True)


def _saved_keys(folder: Path) -> set[str] | None:
    """The weight names in a checkpoint's safetensors files; None when it has none (a PEFT adapter, FSDP)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    single = folder / "model.safetensors"
    if not single.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(single), "pt") as f:
        return set(f.keys())


def reload_weights_if_partial(model: Any, folder: Path) -> None:
    """Load ``folder``'s weights into ``model`` in place through ``from_pretrained`` when the Trainer's
    ``load_state_dict(strict=False)`` could not have loaded them all (saved keys differ from the model's)."""
    saved = _saved_keys(folder)
    if saved is None or not hasattr(model, "from_pretrained"):
        return
    current = model.state_dict()
    if saved == set(current):
        return
    dtype = next(iter(current.values())).dtype
    fresh = type(model).from_pretrained(str(folder), dtype=dtype)
    model.load_state_dict(fresh.state_dict(), strict=True)
    del fresh
