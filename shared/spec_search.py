"""Spec models for the smarter search: strategies beyond grid and random, early
stopping, budgets, pricing and the smoke stage.

* ``strategy``: ``subset`` (a balanced subset of a grid too large to run),
  ``tpe``/``gp``/``cmaes``/``nsga2`` (Optuna's samplers), ``asha``
  (asynchronous successive halving that promotes a trial by resuming it with
  a larger budget).
* ``early_stop``: ``hyperband`` (brackets of ASHA) or ``median`` stopping, on
  top of any strategy but ``asha``.
* ``budget`` and ``pricing``: caps on trials, GPU-hours, cost and wall time.
* ``smoke``: a few short trials first; the rest only if they all succeed.

:func:`search_problems` holds the checks that span these and the rest of the
spec (the budget parameter against the space and the templates, objectives
against the strategy); :class:`~.spec_models.SweepSpec` calls it. The
decisions themselves live in ``spotsweep.services.planner.search``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field, model_validator

from spotsweep.shared.spec_base import Duration, Finite, _Model, _Problems

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec

Problems = list[tuple[tuple[str | int, ...], str]]
MODEL_TYPES = ("tpe", "gp", "cmaes", "nsga2")


class SubsetStrategy(_Model):
    """``trials`` distinct configurations of the grid, every level of every
    parameter equally often (within one); ``seed`` picks the design."""

    type: Literal["subset"] = "subset"
    trials: int = Field(ge=1)
    seed: int = 0
    # Set by `spotsweep extend`: the sizes the design had before each extension
    # (its first trials keep their configs; the new ones repeat none of them).
    extends: list[int] = Field(default_factory=list)


class ModelStrategy(_Model):
    """Optuna's model-based samplers, suggesting each trial from the results so far.

    ``startup_trials``: random trials before the model is used (Optuna's
    ``n_startup_trials``; its default when unset). ``population``: the
    population of ``cmaes`` (``popsize``) and ``nsga2`` (``population_size``).
    """

    type: Literal["tpe", "gp", "cmaes", "nsga2"]
    trials: int = Field(ge=1)
    seed: int = 0
    startup_trials: int | None = Field(default=None, ge=0)
    population: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _population_applies(self) -> ModelStrategy:
        if self.population is not None and self.type not in ("cmaes", "nsga2"):
            raise _Problems([(("population",), f"applies to strategy cmaes and nsga2 only (got type {self.type})")])
        if self.startup_trials is not None and self.type == "nsga2":
            raise _Problems([(("startup_trials",), "does not apply to nsga2; its first generation (population) is random")])
        return self


class BudgetParam(_Model):
    """The budget of a trial for successive halving: ``min`` to ``max`` steps.

    With ``param``, the strategy fills that parameter in (it may appear in
    ``command`` without being in ``space``): a trial runs up to its rung's
    budget and ends, and a promoted trial is relaunched from its checkpoint
    with the next budget. Without ``param``, trials run to their own end and
    the budget is the step they report; a pruned trial is stopped.
    """

    param: str | None = Field(default=None, min_length=1)
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> BudgetParam:
        if self.min >= self.max:
            raise _Problems([(("min",), f"must be less than max (got min={self.min}, max={self.max})")])
        return self


def max_brackets(budget: BudgetParam, eta: int) -> int:
    """Brackets that fit: one per rung below ``max`` (Hyperband's s_max + 1)."""
    return int(math.floor(math.log(budget.max / budget.min) / math.log(eta) + 1e-9)) + 1


class AshaStrategy(_Model):
    """Asynchronous successive halving over configs drawn by ``sampler``.

    ``sampler``: ``grid`` (default when every dimension is a list or an int
    range), ``random`` (the default otherwise), ``sobol`` or ``tpe``.
    ``trials``: configs to try (required unless the grid gives them).
    """

    type: Literal["asha"] = "asha"
    budget: BudgetParam
    eta: int = Field(default=3, ge=2)
    brackets: int = Field(default=1, ge=1)
    trials: int | None = Field(default=None, ge=1)
    seed: int = 0
    sampler: Literal["grid", "random", "sobol", "tpe"] | None = None


class HyperbandStop(_Model):
    """Hyperband as asynchronous brackets of ASHA; trial ``i`` goes to a bracket by its index."""

    type: Literal["hyperband"] = "hyperband"
    budget: BudgetParam
    eta: int = Field(default=3, ge=2)
    brackets: int | None = Field(default=None, ge=1)  # default: every bracket that fits


class MedianStop(_Model):
    """Optuna's MedianPruner: stop a trial whose best value so far is worse than
    the median of the completed trials at the same step."""

    type: Literal["median"] = "median"
    startup_trials: int = Field(default=5, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)
    min_trials: int = Field(default=1, ge=1)


EarlyStop = Annotated[Union[HyperbandStop, MedianStop], Field(discriminator="type")]
EARLY_STOP_TYPES = ("hyperband", "median")


class Budget(_Model):
    """Caps: the planner launches no trial that would pass one."""

    max_trials: int | None = Field(default=None, ge=1)
    max_gpu_hours: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    wall_time: Duration | None = None


class Pricing(_Model):
    """Price of one GPU-hour on the nodes used, and on demand (for the report's comparison)."""

    gpu_hour: Finite = Field(ge=0)
    on_demand_gpu_hour: Finite | None = Field(default=None, ge=0)


class Smoke(_Model):
    """A staged start: ``trials`` trials with ``budget`` as their budget parameter
    first; the rest of the sweep only once they all succeed."""

    trials: int = Field(default=2, ge=1)
    budget: int | None = Field(default=None, ge=1)
    param: str | None = Field(default=None, min_length=1)  # default: the strategy's budget parameter


def budget_of(spec: SweepSpec) -> BudgetParam | None:
    """The successive-halving budget of the spec (strategy asha or early_stop hyperband)."""
    if isinstance(spec.strategy, AshaStrategy):
        return spec.strategy.budget
    if isinstance(spec.early_stop, HyperbandStop):
        return spec.early_stop.budget
    return None


def smoke_param(spec: SweepSpec) -> str | None:
    """The parameter a smoke trial's budget goes into."""
    if spec.smoke is None:
        return None
    budget = budget_of(spec)
    return spec.smoke.param or (budget.param if budget else None)


def enumerable(spec: SweepSpec) -> bool:
    """Every dimension is a list or an int range: the space has a grid."""
    return all(param.type in ("choice", "int") for param in spec.space.values())


def search_problems(spec: SweepSpec, builtins: tuple[str, ...]) -> Problems:
    """Checks across the search fields and the rest of the spec, as (path, message)."""
    from spotsweep.shared.space import grid_size  # space imports the spec models

    problems: Problems = []
    strategy = spec.strategy
    where = ("strategy",) if isinstance(strategy, AshaStrategy) else ("early_stop",)
    budget = budget_of(spec)
    if budget is not None and budget.param is not None:
        problems += _budget_param_problems(spec, budget.param, (*where, "budget", "param"), builtins)
    if isinstance(strategy, SubsetStrategy) or (isinstance(strategy, AshaStrategy) and strategy.sampler == "grid"):
        kind = "subset" if isinstance(strategy, SubsetStrategy) else "asha with sampler grid"
        continuous = [(("space", k), f"{p.type} range cannot be enumerated by strategy {kind}; list the values or use "
                       "a sampler that samples") for k, p in spec.space.items() if p.type in ("uniform", "loguniform")]
        problems += continuous
        if not continuous and isinstance(strategy, SubsetStrategy) and strategy.trials > grid_size(spec.space):
            size = grid_size(spec.space)
            problems.append((("strategy", "trials"), f"must be at most the grid's {size} configurations (got {strategy.trials});"
                             " use strategy grid to run them all"))
    if isinstance(strategy, AshaStrategy):
        if strategy.trials is None and not (enumerable(spec) and strategy.sampler in (None, "grid")):
            problems.append((("strategy", "trials"), "required for strategy asha unless every dimension is a list or an int range"))
        top = max_brackets(strategy.budget, strategy.eta)
        if strategy.brackets > top:
            problems.append((("strategy", "brackets"), f"at most {top} fit between budget min {strategy.budget.min} and max "
                             f"{strategy.budget.max} with eta {strategy.eta} (got {strategy.brackets})"))
        if spec.early_stop is not None:
            problems.append((("early_stop",), "strategy asha already stops trials early; remove early_stop, or use "
                             "strategy random with early_stop hyperband"))
    if isinstance(spec.early_stop, HyperbandStop) and spec.early_stop.brackets is not None:
        top = max_brackets(spec.early_stop.budget, spec.early_stop.eta)
        if spec.early_stop.brackets > top:
            problems.append((("early_stop", "brackets"), f"at most {top} fit between budget min {spec.early_stop.budget.min} "
                             f"and max {spec.early_stop.budget.max} with eta {spec.early_stop.eta} (got {spec.early_stop.brackets})"))
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
    if spec.strategy.type == "nsga2" and n < 2:
        problems.append((("metric",), "strategy nsga2 needs two or more objectives: write metric as a list"))
    if spec.strategy.type == "cmaes" and n > 1:
        problems.append((("strategy", "type"), f"cmaes optimises one metric (got {n} objectives); use tpe, gp or nsga2"))
    if n > 1 and (isinstance(spec.strategy, AshaStrategy) or spec.early_stop is not None):
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
    from spotsweep.shared.space import grid_size, sampler_of  # space imports the spec models

    strategy = spec.strategy
    parts = [f"strategy {strategy.type}"]
    if isinstance(strategy, SubsetStrategy):
        parts[0] += f" ({strategy.trials} of {grid_size(spec.space)} grid points, balanced)"
    elif isinstance(strategy, AshaStrategy):
        b = strategy.budget
        parts[0] += (f" (budget {b.param or 'step'} {b.min}..{b.max}, eta {strategy.eta}, {strategy.brackets} bracket(s), "
                     f"configs from {sampler_of(spec)})")
    elif strategy.type == "random" and sampler_of(spec) == "sobol":
        parts[0] += " (Sobol')"
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
