"""``strategy: random``: independent samples, or scrambled Sobol' points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from spotsweep.shared.spec_search.registry import StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class RandomStrategy(StrategyModel):
    """``trials`` independent samples; ``seed`` makes them reproducible.

    ``sampler: sobol`` draws scrambled Sobol' points instead (quasi-random:
    they cover the ranges more evenly than independent samples).
    """

    type: Literal["random"] = "random"
    trials: int = Field(ge=1)
    seed: int = 0
    sampler: Literal["random", "sobol"] = "random"

    def sampler_name(self, spec: SweepSpec) -> str:
        return self.sampler

    def describe(self, spec: SweepSpec) -> str:
        return " (Sobol')" if self.sampler == "sobol" else ""
