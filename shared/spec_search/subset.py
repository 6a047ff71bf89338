"""``strategy: subset``: a balanced subset of a grid too large to run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from spotsweep.shared.spec_params import grid_size
from spotsweep.shared.spec_search.common import continuous_problems, once_each
from spotsweep.shared.spec_search.registry import Problems, StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class SubsetStrategy(StrategyModel):
    """``trials`` distinct configurations of the grid, every level of every
    parameter equally often (within one); ``seed`` picks the design. ``trials``
    past the grid's size runs each configuration once (with a warning)."""

    type: Literal["subset"] = "subset"
    trials: int = Field(ge=1)
    seed: int = 0
    # Set by `spotsweep extend`: the sizes the design had before each extension
    # (its first trials keep their configs; the new ones repeat none of them).
    extends: list[int] = Field(default_factory=list)

    def problems(self, spec: SweepSpec) -> Problems:
        return continuous_problems(spec, "subset")

    def configs(self, spec: SweepSpec) -> int:
        return min(self.trials, grid_size(spec.space))

    def warnings(self, spec: SweepSpec) -> list[str]:
        return once_each(spec, self.trials)

    def describe(self, spec: SweepSpec) -> str:
        return f" ({self.configs(spec)} of {grid_size(spec.space)} grid points, balanced)"

    def grown(self, spec: SweepSpec, more: int) -> dict[str, Any]:
        """``trials`` raised, remembering the sizes before (``extends``): the rows
        already run stay, new ones keep the whole balanced (``shared/space.py``)."""
        return {**super().grown(spec, more), "extends": [*self.extends, self.trials]}
