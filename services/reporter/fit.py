"""Which leaderboard columns fit the terminal: a pure choice, so `report` reads at 80 columns.

rich shrinks every column of a table wider than the console until trial
names are cut to "…". Instead the rank, the trial name, the objective and
the attempts always stay; params and then other metrics are added in order
while they fit, and the rest are named in one line (``--csv`` has them all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# rich's default table: one space of padding each side and a vertical rule per column, plus the closing rule.
COLUMN_OVERHEAD = 3
TABLE_OVERHEAD = 1
TRIAL_MIN = 12  # a trial name column narrower than this wraps (folds) rather than shrinking further


@dataclass(frozen=True)
class Column:
    name: str
    width: int  # the widest of its header and cells
    required: bool = False


def fit(columns: Sequence[Column], width: int) -> tuple[list[int], list[str]]:
    """The indexes of the columns to show, in order, and the names of those left out."""
    used = TABLE_OVERHEAD + sum(c.width + COLUMN_OVERHEAD for c in columns if c.required)
    kept, dropped = [], []
    for i, c in enumerate(columns):
        if c.required:
            kept.append(i)
        elif used + c.width + COLUMN_OVERHEAD <= width:
            used += c.width + COLUMN_OVERHEAD
            kept.append(i)
        else:
            dropped.append(c.name)
    return kept, dropped


def measured(name: str, cells: Sequence[str], required: bool = False, cap: int | None = None) -> Column:
    """A column as wide as its header and widest cell, at most ``cap`` (a long trial name then wraps)."""
    width = max([len(name), *(len(c) for c in cells)])
    return Column(name, min(width, cap) if cap else width, required)
