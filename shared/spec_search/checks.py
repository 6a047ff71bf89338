"""Questions about a spec's search that span its fields, answered through the
plugins' hooks (no type switches): the early stopping in force, its budget,
the smoke parameter, the checks across fields, and the one-line summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotsweep.shared.spec_search.common import BudgetParam
from spotsweep.shared.spec_search.registry import Problems, StopModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


def stop_of(spec: SweepSpec) -> StopModel | None:
    """The early stopping in force: the one the strategy implies (asha), else ``early_stop``."""
    return spec.strategy.stop() or spec.early_stop


def budget_of(spec: SweepSpec) -> BudgetParam | None:
    """The successive-halving budget of the spec (strategy asha or early_stop hyperband)."""
    stop = stop_of(spec)
    return stop.halving_budget() if stop is not None else None


def smoke_param(spec: SweepSpec) -> str | None:
    """The parameter a smoke trial's budget goes into."""
    if spec.smoke is None:
        return None
    budget = budget_of(spec)
    return spec.smoke.param or (budget.param if budget else None)


def search_problems(spec: SweepSpec, builtins: tuple[str, ...]) -> Problems:
    """Checks across the search fields and the rest of the spec, as (path, message)."""
    problems: Problems = []
    budget = budget_of(spec)
    if budget is not None and budget.param is not None:
        stop = spec.strategy.stop()
        where = ("strategy",) if stop is not None else ("early_stop",)
        path = (stop or spec.early_stop or StopModel).budget_path
        problems += _budget_param_problems(spec, budget.param, (*where, *path), builtins)
    problems += spec.strategy.problems(spec)
    if spec.early_stop is not None:
        problems += spec.early_stop.problems(spec)
    problems += _objective_problems(spec)
    if spec.budget is not None and spec.budget.max_cost is not None and spec.pricing is None:
        problems.append((("budget", "max_cost"), "needs pricing.gpu_hour to turn GPU-hours into cost"))
    problems += _smoke_problems(spec)
    return problems


def _budget_param_problems(spec: SweepSpec, param: str, path: tuple[str, ...], builtins: tuple[str, ...]) -> Problems:
    if param in spec.space:
        return [(path, f"{param!r} is also in space; the strategy sets the budget parameter, so remove it from space")]
    if param in builtins or (param == "seed" and spec.repeats > 1):
        return [(path, f"{param!r} is a built-in parameter; name the budget parameter otherwise (e.g. steps)")]
    return []


def _objective_problems(spec: SweepSpec) -> Problems:
    n = len(spec.objectives) or 1
    names = [m.name for m in spec.objectives]
    problems: Problems = []
    if len(set(names)) != len(names):
        problems.append((("metric",), f"objectives must have distinct names (got {', '.join(names)})"))
    problems += spec.strategy.objective_problems(spec)
    if n > 1 and stop_of(spec) is not None:
        problems.append((("metric",), "early stopping compares one metric; give one objective with asha or early_stop"))
    return problems


def _smoke_problems(spec: SweepSpec) -> Problems:
    smoke = spec.smoke
    if smoke is None:
        return []
    problems: Problems = []
    budget = budget_of(spec)
    param = smoke_param(spec)
    if smoke.budget is not None and param is None:
        problems.append((("smoke", "budget"), "needs a budget parameter: set smoke.param to a parameter in space "
                         "(e.g. steps), or use a budget with a param (strategy asha, early_stop hyperband)"))
    elif smoke.param is not None and smoke.param not in spec.space and not (budget and budget.param == smoke.param):
        problems.append((("smoke", "param"), f"{smoke.param!r} is neither in space nor the budget parameter"))
    if smoke.param is not None and smoke.budget is None:
        problems.append((("smoke", "budget"), "required when smoke.param is set"))
    return problems


def summary(spec: SweepSpec) -> str:
    """One line on how the spec searches, for ``spotsweep validate``."""
    parts = [f"strategy {spec.strategy.type}{spec.strategy.describe(spec)}"]
    if spec.early_stop is not None:
        parts.append(f"early_stop {spec.early_stop.type}")
    if spec.objectives:
        parts.append(f"objectives {', '.join(f'{m.name} ({m.mode})' for m in spec.objectives)}")
    if spec.budget is not None:
        caps = [f"{k} {v:g}" for k, v in spec.budget.model_dump().items() if v is not None]
        parts.append("budget " + ", ".join(caps))
    if spec.smoke is not None:
        parts.append(f"smoke {spec.smoke.trials} trial(s) first")
    return ", ".join(parts)
