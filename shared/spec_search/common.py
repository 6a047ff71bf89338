"""Spec models the search plugins share, and the caps that apply to every strategy.

* :class:`BudgetParam`: the successive-halving budget (asha, hyperband).
* :class:`Budget` and :class:`Pricing`: caps on trials, steps, GPU-hours, cost and wall time.
* :class:`Smoke`: a few short trials first; the rest only if they all succeed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

from pydantic import BeforeValidator, Field, model_validator

from spotsweep.shared.spec_base import Duration, Finite, _Model, _Problems
from spotsweep.shared.spec_params import grid_size

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


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


def enumerable(spec: SweepSpec) -> bool:
    """Every dimension is a list or an int range: the space has a grid."""
    return all(param.type in ("choice", "int") for param in spec.space.values())


def finite_size(spec: SweepSpec) -> int | None:
    """Configurations in the space when it is finite (every dimension a list or an
    int range), else None."""
    if not enumerable(spec):
        return None
    return grid_size(spec.space)


def once_each(spec: SweepSpec, trials: int, field: str = "strategy.trials") -> list[str]:
    """The warning when ``trials`` asks for more configurations than a finite space has."""
    size = finite_size(spec)
    if size is None or trials <= size:
        return []
    return [f"{field}: {trials} but the space has only {size} configurations: each runs once, without repeats "
            f"({size} trial(s))"]


def continuous_problems(spec: SweepSpec, kind: str) -> list[tuple[tuple[str | int, ...], str]]:
    """A continuous range in a space that strategy ``kind`` enumerates, one problem per range."""
    return [(("space", k), f"{p.type} range cannot be enumerated by strategy {kind}; list the values or use "
             "a sampler that samples") for k, p in spec.space.items() if p.type in ("uniform", "loguniform")]


def _positive_steps(value: object) -> object:
    """A step count is a whole number of at least 1 (not ``3.0``, ``"3"`` or ``true``)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"must be a positive integer (got {value!r})")
    return value


Steps = Annotated[int, BeforeValidator(_positive_steps)]


class Budget(_Model):
    """Caps: the planner launches no trial that would pass one.

    ``max_steps`` counts training steps over the sweep's trials: with a
    successive-halving budget parameter (asha, hyperband with ``param``) a
    trial's steps are the budget it reached, otherwise the highest step it
    reported (services/planner/search/budget.py)."""

    max_trials: int | None = Field(default=None, ge=1)
    max_steps: Steps | None = None
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
