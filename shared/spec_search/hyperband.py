"""``early_stop: hyperband``: brackets of asynchronous successive halving
(the planner's ``search/rungs.py`` decides)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from spotsweep.shared.spec_search.common import BudgetParam, max_brackets
from spotsweep.shared.spec_search.registry import Problems, StopModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec


class HyperbandStop(StopModel):
    """Hyperband as asynchronous brackets of ASHA; trial ``i`` goes to a bracket by its index."""

    type: Literal["hyperband"] = "hyperband"
    budget: BudgetParam
    eta: int = Field(default=3, ge=2)
    brackets: int | None = Field(default=None, ge=1)  # default: every bracket that fits
    # paper: a trial waits at its rung and is promoted when it ranks in the best 1/eta of those
    # its rung has seen, checked whenever a slot frees (Li et al.); async: decided once on arrival (Ray Tune)
    promotion: Literal["paper", "async"] = "paper"

    def halving_budget(self) -> BudgetParam:
        return self.budget

    def problems(self, spec: SweepSpec) -> Problems:
        if self.brackets is None:
            return []
        top = max_brackets(self.budget, self.eta)
        if self.brackets > top:
            return [(("early_stop", "brackets"), f"at most {top} fit between budget min {self.budget.min} "
                     f"and max {self.budget.max} with eta {self.eta} (got {self.brackets})")]
        return []
