"""The trial script's side of the process contract: ``from spotsweep import trial``.

An agent runs a trial as a plain process and talks to it only through
environment variables and one append-only file of JSON lines (see
``docs/trial-contract.md``). This module reads that environment once, at
import, and writes those lines, so a Python script need not know the format::

    from spotsweep import trial

    lr = float(trial.params.get("lr", 1e-3))
    trial.report(step, loss=0.31, val_loss=0.35)
    trial.checkpoint_saved(step)      # after the files in trial.checkpoint_dir are complete

Outside spotsweep (no ``SPOTSWEEP_METRICS``) the same script runs standalone:
``params`` is ``{}``, ``checkpoint_dir`` is ``./checkpoints`` and each line
goes to stdout instead of a file.

Non-finite metric values are written as the JSON strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``: Python's bare ``NaN`` token is not JSON
and most other parsers refuse the whole line, and ``null`` would lose the
fact that a run diverged.

The import stays cheap (standard library only) because every trial pays it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["attempt", "checkpoint_dir", "checkpoint_saved", "heartbeat", "is_managed", "params", "report", "resume_step",
           "sweep_id", "trial_id", "trial_name"]

# Keys the agent reads from a line itself; a metric of that name would make
# the line mean something else.
_RESERVED = frozenset({"step", "checkpoint"})
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


@dataclass(frozen=True)
class _Trial:
    """What the agent told this process, read once from the environment."""

    params: dict[str, Any] = field(default_factory=dict)
    sweep_id: str | None = None
    trial_id: str | None = None
    trial_name: str | None = None
    attempt: int = 1
    metrics_path: Path | None = None
    checkpoint_dir: Path = field(default_factory=lambda: Path("checkpoints").absolute())
    resume_step: int | None = None

    @property
    def is_managed(self) -> bool:
        return self.metrics_path is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> _Trial:
        """Parse the contract's variables; a malformed one is the agent's bug, so fail loudly."""
        raw_params = env.get("SPOTSWEEP_PARAMS", "")
        params: Any = json.loads(raw_params) if raw_params.strip() else {}
        if not isinstance(params, dict):
            raise ValueError(f"SPOTSWEEP_PARAMS must be a JSON object, got {type(params).__name__}")
        metrics = env.get("SPOTSWEEP_METRICS")
        ckpt = env.get("SPOTSWEEP_CHECKPOINT_DIR")
        return cls(
            params=params,
            sweep_id=env.get("SPOTSWEEP_SWEEP_ID"),
            trial_id=env.get("SPOTSWEEP_TRIAL_ID"),
            trial_name=env.get("SPOTSWEEP_TRIAL_NAME"),
            attempt=_int_var(env, "SPOTSWEEP_ATTEMPT") or 1,
            metrics_path=Path(metrics) if metrics else None,
            checkpoint_dir=Path(ckpt).absolute() if ckpt else Path("checkpoints").absolute(),
            resume_step=_int_var(env, "SPOTSWEEP_RESUME_STEP"),
        )


def _int_var(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


MAX_STEP = 2**63 - 1  # steps are stored as PostgreSQL bigint


def _check_step(step: object) -> int:
    # bool is an int subclass, but True as a step is always a mistake.
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int, got {type(step).__name__} {step!r}")
    value = int(step)
    if not 0 <= value <= MAX_STEP:
        raise ValueError(f"step must be between 0 and {MAX_STEP}, got {value}")
    return value


def _encode_value(name: str, value: object) -> int | float | str:
    """A metric as a JSON-safe value: an int, a finite float, or "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(value, (bool, str, bytes)) or not (
        isinstance(value, numbers.Real) or hasattr(type(value), "__float__")
    ):
        raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Integral) and abs(int(value)) <= 2**53:
        return int(value)  # a count or a step stays an integer in the line (``resumed_from``: 10, not 10.0)
    try:
        # __float__ covers numpy scalars and one-element tensors without importing either.
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise TypeError(f"metric {name!r} must be a single number: {e}") from None
    if math.isnan(number):
        return "NaN"
    return _NON_FINITE.get(number, number)


def _format(record: dict[str, Any]) -> bytes:
    # allow_nan=False: a non-finite float that slipped through is a bug here, not a bad line there.
    return (json.dumps(record, allow_nan=False, separators=(", ", ": ")) + "\n").encode()


def _emit(line: bytes) -> None:
    """Append one whole line with a single write, so a tailing reader never sees half of it."""
    path = _TRIAL.metrics_path
    if path is None:
        sys.stdout.write(line.decode())
        sys.stdout.flush()
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(line)
        while view:  # a regular file takes it all at once; the loop is for the odd short write
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def report(step: int, **metrics: float) -> None:
    """Record ``metrics`` at ``step``: one line ``{"step": step, name: value, ...}``.

    The step is the script's own counter (an int >= 0); metrics are numbers.
    Raises ``TypeError``/``ValueError`` for anything else, at the call that is
    wrong rather than as a skipped line in the agent's log.
    """
    record: dict[str, Any] = {"step": _check_step(step)}
    for name, value in metrics.items():
        if name in _RESERVED:
            raise ValueError(f"{name!r} is reserved by the metrics format and cannot be a metric name")
        record[name] = _encode_value(name, value)
    _emit(_format(record))


def checkpoint_saved(step: int) -> None:
    """Declare that ``checkpoint_dir`` now holds a complete checkpoint at ``step``.

    Call it only after the files are fully written (write to a temp file, then
    rename): the agent uploads the directory as soon as it reads this line.
    """
    _emit(_format({"checkpoint": _check_step(step)}))


def heartbeat() -> None:
    """Say "still alive" without a metric: one line ``{"heartbeat": <unix time>}``.

    Only needed by a trial that can go longer than the sweep's
    ``timeout.stall`` between reports (a long evaluation, data preparation);
    any metric or checkpoint line counts as a heartbeat too.
    """
    _emit(_format({"heartbeat": round(time.time(), 3)}))


_TRIAL = _Trial.from_env(os.environ)


def __getattr__(name: str) -> Any:
    """``trial.params`` etc.: read from the environment captured at import."""
    if name == "checkpoint_dir":
        # Created on first use so that a standalone run has somewhere to save.
        _TRIAL.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return _TRIAL.checkpoint_dir
    if name in {"params", "sweep_id", "trial_id", "trial_name", "attempt", "resume_step", "is_managed"}:
        return getattr(_TRIAL, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
