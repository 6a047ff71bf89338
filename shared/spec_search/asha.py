"""``strategy: asha``: asynchronous successive halving over configs drawn by a
sampler; a promoted trial resumes with a larger budget (the planner's
``search/rungs.py`` decides, as for ``early_stop: hyperband``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from spotsweep.shared.spec_search.common import (
    BudgetParam, continuous_problems, enumerable, finite_size, max_brackets, once_each,
)
from spotsweep.shared.spec_search.hyperband import HyperbandStop
from spotsweep.shared.spec_search.registry import Problems, StrategyModel

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec

# Samplers that never repeat a config over a finite space (so ``trials`` is capped
# at its size); a model (tpe) proposes from what it learned and may.
_WITHOUT_REPEATS = ("grid", "random", "sobol")


class AshaStrategy(StrategyModel):
    """Asynchronous successive halving over configs drawn by ``sampler``.

    ``sampler``: ``grid`` (default when every dimension is a list or an int
    range), ``random`` (the default otherwise), ``sobol`` or ``tpe``.
    ``trials``: configs to try (required unless the grid gives them).
    ``order``: a grid's configs in a ``shuffled`` order seeded by ``seed``
    (the default) or as ``listed``. Random and Sobol' draws over a finite
    space never repeat a config.
    """

    type: Literal["asha"] = "asha"
    budget: BudgetParam
    eta: int = Field(default=3, ge=2)
    brackets: int = Field(default=1, ge=1)
    trials: int | None = Field(default=None, ge=1)
    seed: int = 0
    sampler: Literal["grid", "random", "sobol", "tpe"] | None = None
    order: Literal["shuffled", "listed"] = "shuffled"
    promotion: Literal["paper", "async"] = "paper"  # see HyperbandStop

    def sampler_name(self, spec: SweepSpec) -> str:
        if self.sampler is not None:
            return self.sampler
        return "grid" if enumerable(spec) else "random"

    def configs(self, spec: SweepSpec) -> int:
        sampler = self.sampler_name(spec)
        size = finite_size(spec) if sampler in _WITHOUT_REPEATS else None
        if size is None:
            return super().configs(spec)
        return size if self.trials is None else min(size, self.trials)

    def grid_shuffle(self, spec: SweepSpec) -> int | None:
        return self.seed if self.order == "shuffled" else None

    def warnings(self, spec: SweepSpec) -> list[str]:
        if self.trials is None or self.sampler_name(spec) not in _WITHOUT_REPEATS:
            return []
        return once_each(spec, self.trials)

    def stop(self) -> HyperbandStop:
        """One (or ``brackets``) brackets of successive halving: Hyperband's decisions."""
        return self.implied_stop

    @cached_property
    def implied_stop(self) -> HyperbandStop:  # built once: validation asks for it several times
        return HyperbandStop(budget=self.budget, eta=self.eta, brackets=self.brackets, promotion=self.promotion)

    def problems(self, spec: SweepSpec) -> Problems:
        problems = continuous_problems(spec, "asha with sampler grid") if self.sampler == "grid" else []
        if self.trials is None and not (enumerable(spec) and self.sampler in (None, "grid")):
            problems.append((("strategy", "trials"), "required for strategy asha unless every dimension is a list or an "
                             "int range"))
        top = max_brackets(self.budget, self.eta)
        if self.brackets > top:
            problems.append((("strategy", "brackets"), f"at most {top} fit between budget min {self.budget.min} and max "
                             f"{self.budget.max} with eta {self.eta} (got {self.brackets})"))
        if spec.early_stop is not None:
            problems.append((("early_stop",), "strategy asha already stops trials early; remove early_stop, or use "
                             "strategy random with early_stop hyperband"))
        return problems

    def describe(self, spec: SweepSpec) -> str:
        b = self.budget
        return (f" (budget {b.param or 'step'} {b.min}..{b.max}, eta {self.eta}, {self.brackets} bracket(s), "
                f"configs from {self.sampler_name(spec)})")
