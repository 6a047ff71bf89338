"""NaN and infinities between floats and the trial contract's strings, in one place.

Strict JSON, and so PostgreSQL's jsonb, has no NaN or Infinity; the trial
contract (docs/trial-contract.md) writes them as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``. :func:`json_safe` writes them so on the
way into a store, :func:`number` reads a stored value back as a float, and
:func:`finite` answers the one question every ranking and chart asks. A bool
is never a number here (``True`` is an int to Python, not a measurement).

Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# The contract's spellings, as stored.
CONTRACT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# ...and Python's own (str(float)), which the reporter also reads: values that never left a process.
ANY_SPELLING = {**CONTRACT, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def number(value: object, spellings: Mapping[str, float] = CONTRACT) -> float | None:
    """A stored value as a float, non-finite ones too (from ``spellings``); None when it is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return spellings.get(value)
    return None


def finite(value: object, spellings: Mapping[str, float] = CONTRACT) -> float | None:
    """A stored value as a float when it is a finite number, else None."""
    got = number(value, spellings)
    return got if got is not None and math.isfinite(got) else None


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float, also inside mappings, lists and tuples,
    written as the contract's string, so ``json.dumps(..., allow_nan=False)`` and
    jsonb accept it."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
