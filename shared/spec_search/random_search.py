"""``strategy: random``: independent samples, or scrambled Sobol' points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from spotsweep.shared.spec_search.common import finite_size, once_each
from spotsweep.shared.spec_search.registry import StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class RandomStrategy(StrategyModel):
    """``trials`` independent samples; ``seed`` makes them reproducible.

    Over a finite space (every dimension a list or an int range) the draws are
    without replacement: no configuration repeats, and ``trials`` past the
    space's size runs each configuration once (with a warning).

    ``sampler: sobol`` draws scrambled Sobol' points instead (quasi-random:
    they cover the ranges more evenly than independent samples); over a
    finite space it takes the distinct cells the stream visits, so the same
    cap and warning apply.
    """

    type: Literal["random"] = "random"
    trials: int = Field(ge=1)
    seed: int = 0
    sampler: Literal["random", "sobol"] = "random"

    def sampler_name(self, spec: SweepSpec) -> str:
        return self.sampler

    def configs(self, spec: SweepSpec) -> int:
        size = finite_size(spec)
        return self.trials if size is None else min(self.trials, size)

    def warnings(self, spec: SweepSpec) -> list[str]:
        return once_each(spec, self.trials)

    def describe(self, spec: SweepSpec) -> str:
        return " (Sobol')" if self.sampler == "sobol" else ""
