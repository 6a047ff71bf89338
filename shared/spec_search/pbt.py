"""``strategy: pbt``: population-based training (Jaderberg et al., 2017).

``population`` trials train at once, each in segments of ``interval.every``
units of the budget parameter (``interval.param``, filled in by the planner
like asha's) up to ``interval.max``. When a trial ends a segment, the
planner's ``search/pbt.py`` decides: in the bottom ``quantile`` of the
population it *exploits* a top-quantile trial (its latest checkpoint is
copied into the trial's own prefix, on the store's side) and *explores*
(``mutations``: each listed param multiplied by one of ``factor``, or moved
to a neighbour in ``values``, or with ``resample_probability`` drawn afresh
from the space); otherwise it goes on with its own checkpoint and params.
"""

from __future__ import annotations

import random
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from spotsweep.shared.spec_base import Finite, _Model, _Problems
from spotsweep.shared.spec_params import sample
from spotsweep.shared.spec_search.common import BudgetParam
from spotsweep.shared.spec_search.registry import Problems, StopModel, StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class PbtInterval(_Model):
    """Segments of ``every`` units of ``param``; a trial is done at ``max``."""

    param: str = Field(min_length=1)
    every: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _room(self) -> PbtInterval:
        if self.max <= self.every:
            raise _Problems([(("max",), f"must be more than every (got max={self.max}, every={self.every}): "
                              "a trial needs a second segment for PBT to act")])
        return self


class Mutation(_Model):
    """How explore changes one param: ``factor`` (multiply by one of these) or
    ``values`` (move to a neighbour in this ordered list)."""

    factor: list[Finite] | None = Field(default=None, min_length=1)
    values: list[Any] | None = Field(default=None, min_length=2)

    @model_validator(mode="after")
    def _one(self) -> Mutation:
        if (self.factor is None) == (self.values is None):
            raise _Problems([((), "give exactly one of factor (e.g. [0.8, 1.2]) or values (an ordered list)")])
        if self.factor is not None and any(f <= 0 for f in self.factor):
            raise _Problems([(("factor",), f"factors must be greater than 0 (got {self.factor})")])
        return self


class PbtStop(StopModel):
    """The segment decisions PBT implies (not an ``early_stop`` of its own:
    the planner's stopper registry runs it by this type)."""

    type: Literal["pbt"] = "pbt"
    interval: PbtInterval
    quantile: float
    mutations: dict[str, Mutation]
    resample_probability: float
    seed: int = 0
    budget_path: ClassVar[tuple[str, ...]] = ("interval", "param")

    def halving_budget(self) -> BudgetParam:
        i = self.interval
        return BudgetParam(param=i.param, min=i.every, max=i.max)


class PbtStrategy(StrategyModel):
    """Population-based training; ``seed`` fixes the first params and every explore draw."""

    type: Literal["pbt"] = "pbt"
    inherits_checkpoints: ClassVar[bool] = True  # an exploit continues from a donor's checkpoint
    population: int = Field(ge=2)
    interval: PbtInterval
    quantile: float = Field(default=0.25, gt=0, le=0.5)
    mutations: dict[str, Mutation] = Field(min_length=1)
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    seed: int = 0

    def configs(self, spec: SweepSpec) -> int:
        return self.population

    def design(self, spec: SweepSpec, config: int) -> dict[str, Any]:
        """Member ``config``'s first params: independent draws from the space
        (seeded by ``seed`` and ``config``; members may coincide: explore
        takes them apart)."""
        rng = random.Random(f"spotsweep:pbt:{self.seed}:{config}")
        return {key: sample(rng, param) for key, param in spec.space.items()}

    def stop(self) -> PbtStop:
        return self.implied_stop

    @cached_property
    def implied_stop(self) -> PbtStop:  # built once: validation asks for it several times
        return PbtStop(interval=self.interval, quantile=self.quantile, mutations=self.mutations,
                       resample_probability=self.resample_probability, seed=self.seed)

    def problems(self, spec: SweepSpec) -> Problems:
        problems: Problems = []
        for key, mutation in self.mutations.items():
            where: tuple[str | int, ...] = ("strategy", "mutations", key)
            param = spec.space.get(key)
            if param is None:
                problems.append((where, f"{key!r} is not in space (space has {', '.join(spec.space) or 'nothing'})"))
            elif mutation.factor is not None and param.type == "choice" and not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in param.values):  # type: ignore[union-attr]
                problems.append(((*where, "factor"), f"{key!r} is a list of non-numbers; mutate it with values"))
        if spec.early_stop is not None:
            problems.append((("early_stop",), "strategy pbt decides at each interval itself; remove early_stop"))
        if spec.repeats > 1:
            problems.append((("repeats",), f"strategy pbt runs one population; repeats must be 1 (got {spec.repeats})"))
        return problems

    def grown(self, spec: SweepSpec, more: int) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        data["population"] += more
        return data

    def describe(self, spec: SweepSpec) -> str:
        i = self.interval
        return (f" (population {self.population}, every {i.every} {i.param} up to {i.max}, quantile {self.quantile:g}, "
                f"mutating {', '.join(self.mutations)})")

