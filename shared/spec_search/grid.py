"""``strategy: grid``: every combination in order, the first ``max_trials`` of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec_params import GRID_CONTINUOUS, Param, grid_size
from spotsweep.shared.spec_search.registry import Problems, StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class GridStrategy(StrategyModel):
    """Every combination in order (first space key slowest), the first ``max_trials`` of them.

    ``order``: ``listed`` (the default) or ``shuffled`` (a seeded permutation
    by ``seed``, never materialised); under ``early_stop: hyperband`` the
    default is ``shuffled``, so that each bracket's first rung is a fair
    sample of the grid rather than neighbours that differ in one parameter.
    """

    type: Literal["grid"] = "grid"
    max_trials: int | None = Field(default=None, ge=1)
    order: Literal["listed", "shuffled"] | None = None
    seed: int = 0

    def grid_shuffle(self, spec: SweepSpec) -> int | None:
        halving = spec.early_stop is not None and spec.early_stop.halving_budget() is not None
        shuffled = self.order == "shuffled" or (self.order is None and halving)
        return self.seed if shuffled else None

    def configs(self, spec: SweepSpec) -> int:
        size = grid_size(spec.space)
        return size if self.max_trials is None else min(size, self.max_trials)

    def param_problems(self, key: str, param: Param) -> Problems:
        if param.type in ("uniform", "loguniform"):
            return [(("space", key), GRID_CONTINUOUS.format(kind=param.type))]
        return []

    def grown(self, spec: SweepSpec, more: int) -> dict[str, Any]:
        """``max_trials`` raised, up to the grid's size."""
        size = grid_size(spec.space)
        current = self.max_trials or size
        if current >= size:
            raise SpecError([("trials", f"the grid's {size} configurations are all in the sweep already")])
        return {**self.model_dump(mode="json", by_alias=True), "max_trials": min(size, current + more)}
