"""Metric values as stored, read back as numbers, shown and ranked.

The trial contract writes a non-finite value as one of the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (strict JSON has no such numbers), and the
``metrics`` jsonb of ``trial_results`` keeps them that way. Everything the
reporter shows or ranks reads a value through :func:`metric_float`, so a
diverged trial prints ``nan`` and ranks last instead of crashing ``ls``.

Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# The contract's spellings (docs/trial-contract.md), and Python's own for values that never left a process.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf,
               "nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def metric_float(value: object) -> float | None:
    """A stored metric value as a float (non-finite ones too), or None when it is no number."""
    if isinstance(value, bool):  # True is an int to Python, not a measurement
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    return None


def is_finite(value: object) -> bool:
    """Whether a stored value is a finite number."""
    number = metric_float(value)
    return number is not None and math.isfinite(number)


def fmt(value: object) -> str:
    """A value for a human: floats in 6 significant digits, non-finite as ``nan``/``inf``/``-inf``,
    the contract's strings too; None as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"  # nan, inf, -inf for the non-finite
    if isinstance(value, str) and value in _NON_FINITE:
        return f"{_NON_FINITE[value]:.6g}"
    return str(value)


def exact(value: object) -> str:
    """A value for a file (CSV): floats in full (``repr``), non-finite as ``nan``/``inf``/``-inf``."""
    if isinstance(value, float):
        return repr(value)  # 'nan', 'inf', '-inf' for the non-finite
    return fmt(value)


def rank_key(value: object, mode: str) -> tuple[int, float]:
    """Sort key, best first: finite values by ``mode`` (min or max), then every
    non-finite or missing value (a diverged trial is never the best one)."""
    number = metric_float(value)
    if number is None or not math.isfinite(number):
        return (1, 0.0)
    return (0, number if mode == "min" else -number)


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float written as the contract's string, so
    ``json.dumps(..., allow_nan=False)`` gives strict JSON any parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
