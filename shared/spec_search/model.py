"""``strategy: tpe | gp | cmaes | nsga2``: Optuna's model-based samplers
(the planner's ``search/model.py`` runs them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from spotsweep.shared.spec_base import _Problems
from spotsweep.shared.spec_search.registry import Problems, StrategyModel, types_of

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec

class ModelStrategy(StrategyModel):
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

    def objective_problems(self, spec: SweepSpec) -> Problems:
        n = len(spec.objectives) or 1
        if self.type == "nsga2" and n < 2:
            return [(("metric",), "strategy nsga2 needs two or more objectives: write metric as a list")]
        if self.type == "cmaes" and n > 1:
            return [(("strategy", "type"), f"cmaes optimises one metric (got {n} objectives); use tpe, gp or nsga2")]
        return []


MODEL_TYPES = types_of(ModelStrategy)  # ("tpe", "gp", "cmaes", "nsga2"): the planner runs each with ModelSearch
