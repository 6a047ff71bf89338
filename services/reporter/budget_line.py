"""The budget line of ``spotsweep status`` and ``spotsweep report``: what a
sweep has spent against each cap its spec sets, e.g.
``budget: 12/200 trials, 27/40 steps, 3.10/10 GPU-h``.

Steps are counted as the planner counts them against ``budget.max_steps``
(the view's ``steps``, migration 0005); the elapsed time is the sweep's from
its submission to its end (or ``now``), which is ``wall_time``'s measure
unless the sweep waited, ended, for an ``extend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from spotsweep.shared.spec_search import Budget


@dataclass(frozen=True)
class Spent:
    """What a sweep has used, from its ``sweep_results`` row."""

    trials: int  # regular trials launched
    steps: float
    gpu_hours: float
    cost: float | None  # None without pricing
    elapsed_seconds: float


def spent_of(row: Mapping[str, Any], now: datetime) -> Spent:
    """:class:`Spent` from a ``sweep_results`` row (``trials``, ``steps``, ``gpu_hours``,
    ``cost``, ``created_at``, ``finished_at``); ``now`` ends a running sweep's time."""
    end = row.get("finished_at") or now
    start = row.get("created_at") or end
    return Spent(int(row.get("trials") or 0), float(row.get("steps") or 0), float(row.get("gpu_hours") or 0),
                 None if row.get("cost") is None else float(row["cost"]), max(0.0, (end - start).total_seconds()))


def caps_of(stored: Any) -> Budget | None:
    """The spec's ``budget`` block as stored (what the client sent), validated; None when absent or
    invalid: a block that does not validate gives no line, never an error."""
    if not isinstance(stored, dict) or not stored:
        return None
    try:
        return Budget.model_validate(stored)
    except ValidationError:
        return None


def budget_line(caps: Budget | None, spent: Spent) -> str | None:
    """``budget: USED/CAP UNIT, ...`` for each cap set, in the spec's order; None without caps."""
    if caps is None:
        return None
    parts = []
    if caps.max_trials is not None:
        parts.append(f"{spent.trials}/{caps.max_trials} trials")
    if caps.max_steps is not None:
        parts.append(f"{spent.steps:.0f}/{caps.max_steps} steps")
    if caps.max_gpu_hours is not None:
        parts.append(f"{spent.gpu_hours:.2f}/{caps.max_gpu_hours:g} GPU-h")
    if caps.max_cost is not None:
        parts.append(f"{spent.cost or 0.0:.2f}/{caps.max_cost:g} cost")
    if caps.wall_time is not None:
        parts.append(f"{duration(spent.elapsed_seconds)}/{duration(caps.wall_time)} wall time")
    return "budget: " + ", ".join(parts) if parts else None


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``2h05m``, ``1d3h``: short, to the unit that matters."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60:02d}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")
