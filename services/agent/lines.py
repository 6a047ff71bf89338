"""Reading the trial's metrics file: pure parsing plus an incremental tail.

The file is the whole interface between a trial script and spotsweep, so a
bad line is logged and skipped, never fatal, and a half-written last line is
left for the next read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path


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
        return BadLine(line, f"not JSON: {e}")
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
        return BadLine(line, f"step must be an integer, got {data['step']!r}")
    if not 0 <= step <= MAX_STEP:  # one such point would fail the collector's whole batch
        return BadLine(line, f"step must be between 0 and {MAX_STEP}, got {step}")
    values: dict[str, float] = {}
    for name, raw in data.items():
        if name == "step":
            continue
        num = _number(raw)
        if num is None:
            return BadLine(line, f"metric {name!r} is not a number: {raw!r}")
        values[name] = num
    return Points(step, values)


class Tail:
    """Complete lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self, final: bool = False) -> list[str]:
        """New complete lines; with ``final`` also an unterminated last line."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return [raw.decode("utf-8", "replace") for raw in lines if raw.strip()]
