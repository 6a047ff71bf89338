"""Parsing one line of the trial's metrics file (pure).

The file is the whole interface between a trial script and spotsweep, so a
bad line becomes a :class:`BadLine` that says why, never an exception.
Reading the file safely is :mod:`.tail`'s job; which lines get through the
spec's limits is :mod:`.screen`'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Points:
    step: int
    values: dict[str, float]


@dataclass(frozen=True)
class Checkpoint:
    step: int


@dataclass(frozen=True)
class Heartbeat:
    """``{"heartbeat": ...}``: the trial is alive (for timeout.stall) but has nothing to report."""


@dataclass(frozen=True)
class BadLine:
    line: str
    reason: str


Parsed = Points | Checkpoint | Heartbeat | BadLine
MAX_STEP = 2**63 - 1  # points.step is a PostgreSQL bigint

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond a double: not a metric value
            return None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return None


def _short(value: object, most: int = 80) -> str:
    """``repr(value)``, cut: a reason must stay short whatever the line held."""
    text = repr(value) if not isinstance(value, BaseException) else str(value)
    return text if len(text) <= most else text[:most] + "..."


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def parse_line(line: str) -> Parsed:
    """One JSON line of the metrics file."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        return BadLine(line, f"not JSON: {e.msg}")
    except ValueError as e:  # an integer literal past Python's digit limit
        return BadLine(line, f"not JSON: {_short(e)}")
    except RecursionError:  # "[[[[..." deeper than the parser goes
        return BadLine(line, "not JSON: nested too deeply")
    if not isinstance(data, dict):
        return BadLine(line, "not a JSON object")
    if "heartbeat" in data and len(data) == 1:
        return Heartbeat()
    if "checkpoint" in data:
        step = _int(data["checkpoint"])
        if step is None or not 0 <= step <= MAX_STEP:
            return BadLine(line, "checkpoint must be a non-negative integer step")
        return Checkpoint(step)
    if "step" not in data:
        return BadLine(line, "missing integer 'step'")
    step = _int(data["step"])
    if step is None:
        return BadLine(line, f"step must be an integer, got {_short(data['step'])}")
    if not 0 <= step <= MAX_STEP:  # one such point would fail the collector's whole batch
        return BadLine(line, f"step must be between 0 and {MAX_STEP}, got {step}")
    values: dict[str, float] = {}
    for name, raw in data.items():
        if name == "step":
            continue
        num = _number(raw)
        if num is None:
            return BadLine(line, f"metric {_short(name)} is not a number: {_short(raw)}")
        values[name] = num
    return Points(step, values)
