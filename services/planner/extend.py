"""``spotsweep extend``: more trials, or a larger budget, for a sweep that runs or ran.

:func:`extended` is the pure part: the sweep's spec with ``trials`` more
trials and the budget caps replaced, validated like any spec (errors name
the field and the value). The history stays: trials already launched keep
their rows and params, the search sees them, and the new trials take the
next indexes. Static designs stay consistent: random and Sobol points are
per index; a subset keeps its rows and grows by new ones drawn so that the
whole is balanced for its new size, none repeating; a grid grows up to its
size. The time a finished sweep waited for the extension does not count
against ``wall_time`` (it counts the sweep's running time).
"""

from __future__ import annotations

from typing import Any

from spotsweep.shared.errors import SpecError
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec, parse_spec

BUDGET_FIELDS = ("max_trials", "max_steps", "max_gpu_hours", "max_cost", "wall_time")


def extended(spec: SweepSpec, trials: int = 0, budget: dict[str, Any] | None = None) -> SweepSpec:
    """The spec with ``trials`` more configurations (times ``repeats``: trials
    count configs, as in the strategy) and ``budget`` fields replaced."""
    if trials < 0:
        raise SpecError([("trials", f"must be zero or more (got {trials})")])
    data = spec.to_json_dict()
    if trials:  # each strategy knows how it grows (grid: max_trials, subset: extends, the rest: trials)
        data["strategy"] = spec.strategy.grown(spec, trials)
    if budget:
        unknown = sorted(set(budget) - set(BUDGET_FIELDS))
        if unknown:
            raise SpecError([(f"budget.{unknown[0]}", f"is not a budget cap; use {', '.join(BUDGET_FIELDS)}")])
        data["budget"] = {**(data.get("budget") or {}), **budget}
    new = parse_spec(data)
    if total_trials(new) < total_trials(spec):
        raise SpecError([("trials", "an extension cannot shrink the sweep")])
    return new
