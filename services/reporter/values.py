"""Metric values as stored, read back as numbers, shown and ranked.

The trial contract writes a non-finite value as one of the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (strict JSON has no such numbers), and the
``metrics`` jsonb of ``trial_results`` keeps them that way. Everything the
reporter shows or ranks reads a value through :func:`metric_float`, so a
diverged trial prints ``nan`` and ranks last instead of crashing ``ls``.

Pure functions; no I/O.
"""

from __future__ import annotations

from spotsweep.shared.nonfinite import ANY_SPELLING, finite, number


def metric_float(value: object) -> float | None:
    """A stored metric value as a float (non-finite ones too), or None when it is no number."""
    return number(value, ANY_SPELLING)


def fmt(value: object) -> str:
    """A value for a human: floats in 6 significant digits, non-finite as ``nan``/``inf``/``-inf``,
    the contract's strings too; None as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"  # nan, inf, -inf for the non-finite
    if isinstance(value, str) and value in ANY_SPELLING:
        return f"{ANY_SPELLING[value]:.6g}"
    return str(value)


def exact(value: object) -> str:
    """A value for a file (CSV): floats in full (``repr``), non-finite as ``nan``/``inf``/``-inf``."""
    if isinstance(value, float):
        return repr(value)  # 'nan', 'inf', '-inf' for the non-finite
    return fmt(value)


def rank_key(value: object, mode: str) -> tuple[int, float]:
    """Sort key, best first: finite values by ``mode`` (min or max), then every
    non-finite or missing value (a diverged trial is never the best one)."""
    got = finite(value, ANY_SPELLING)
    if got is None:
        return (1, 0.0)
    return (0, got if mode == "min" else -got)
