"""Spec models for the search: strategies, early stopping, budgets, pricing
and the smoke stage, one plugin module per strategy or stopper.

* ``strategy`` (:mod:`.grid`, :mod:`.random_search`, :mod:`.subset`,
  :mod:`.model`, :mod:`.asha`): ``grid``, ``random`` (or Sobol'), ``subset``
  (a balanced subset of a grid too large to run), ``tpe``/``gp``/``cmaes``/
  ``nsga2`` (Optuna's samplers), ``asha`` (asynchronous successive halving
  that promotes a trial by resuming it with a larger budget), ``pbt``
  (:mod:`.pbt`: population-based training over checkpoint copies).
* ``early_stop`` (:mod:`.hyperband`, :mod:`.median`): ``hyperband`` (brackets
  of ASHA) or ``median`` stopping, on top of any strategy but ``asha``.
* ``budget``, ``pricing``, ``smoke`` (:mod:`.common`).

Every plugin model subclasses :class:`.registry.StrategyModel` or
:class:`.registry.StopModel` and is registered below, in the order the
types are listed in error messages; :mod:`.registry` builds the spec's
unions and type lists from it. :func:`search_problems` (:mod:`.checks`)
holds the checks that span these and the rest of the spec;
:class:`~spotsweep.shared.spec_models.SweepSpec` calls it. The decisions
themselves live in ``spotsweep.services.planner.search``. docs/search.md
says how to add a strategy or a stopper.
"""

from __future__ import annotations

from spotsweep.shared.spec_search.asha import AshaStrategy
from spotsweep.shared.spec_search.checks import budget_of, search_problems, smoke_param, stop_of, summary
from spotsweep.shared.spec_search.common import Budget, BudgetParam, Pricing, Smoke, enumerable, max_brackets
from spotsweep.shared.spec_search.grid import GridStrategy
from spotsweep.shared.spec_search.hyperband import HyperbandStop
from spotsweep.shared.spec_search.median import MedianStop
from spotsweep.shared.spec_search.model import MODEL_TYPES, ModelStrategy
from spotsweep.shared.spec_search.pbt import Mutation, PbtInterval, PbtStop, PbtStrategy
from spotsweep.shared.spec_search.random_search import RandomStrategy
from spotsweep.shared.spec_search.registry import (Problems, StopModel, StrategyModel, on_change, register_stop,
                                                   register_strategy, stop_types, stop_union, strategy_types,
                                                   strategy_union, unregister)
from spotsweep.shared.spec_search.subset import SubsetStrategy

for _strategy in (GridStrategy, RandomStrategy, SubsetStrategy, ModelStrategy, AshaStrategy, PbtStrategy):
    register_strategy(_strategy)
for _stop in (HyperbandStop, MedianStop):
    register_stop(_stop)

__all__ = ["MODEL_TYPES", "AshaStrategy", "Budget", "BudgetParam", "GridStrategy", "HyperbandStop", "MedianStop",
           "ModelStrategy", "Mutation", "PbtInterval", "PbtStop", "PbtStrategy", "Pricing", "Problems",
           "RandomStrategy", "Smoke", "StopModel", "StrategyModel", "SubsetStrategy", "budget_of", "enumerable",
           "max_brackets", "on_change", "register_stop", "register_strategy", "search_problems", "smoke_param",
           "stop_of", "stop_types", "stop_union", "strategy_types", "strategy_union", "summary", "unregister"]
