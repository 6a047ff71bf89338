"""The planner's side of the search plugins: what runs each registered type.

The spec models (``spotsweep.shared.spec_search``) say what a strategy or
stopper *is*; this registry what the planner *does* with it, in Optuna's
split between samplers and pruners. A :class:`Sampler` suggests a new
trial's params from the history (tpe, gp, cmaes, nsga2; by the strategy
model's ``sampler_name``); a static design needs none
(:func:`~spotsweep.shared.space.params_at`). A :class:`Stopper` decides
whether a trial goes on (by the ``type`` of the early stopping in force).
:class:`~.strategy.Search` asks :func:`sampler_for` and :func:`stopper_for`
and never switches on a type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from spotsweep.services.planner.search.bohb import Bohb
from spotsweep.services.planner.search.history import TrialRecord
from spotsweep.services.planner.search.median import Median
from spotsweep.services.planner.search.model import ModelSearch, Suggestion
from spotsweep.services.planner.search.pbt import Pbt
from spotsweep.services.planner.search.rungs import Asha, Promotion, StepDecision
from spotsweep.shared.space import sampler_of
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.spec_search import MODEL_TYPES, StopModel, stop_of


class Sampler(Protocol):
    """Suggests trial ``index``'s params from the trials launched before it."""

    def suggest(self, history: Sequence[TrialRecord], index: int,
                study_attrs: Mapping[str, Any] | None = None) -> Suggestion: ...


class Stopper(Protocol):
    """Decides on a trial that reported ``value`` at ``step`` (or ended its run at budget ``step``).

    ``waits``: the stopper may PAUSE a trial at a rung; :meth:`promotions` then
    says which waiting trials to relaunch when slots are free."""

    waits: bool

    def promotions(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        """Waiting trials to relaunch now, at most ``slots``, best claim first (``final``: nothing else can run)."""

    def initial_budget(self, index: int) -> int | None:
        """The budget parameter trial ``index`` starts with; None: the stopper sets none."""

    def decide(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision: ...


SamplerFactory = Callable[[SweepSpec], Sampler]
StopperFactory = Callable[[Any, SweepSpec], Stopper]  # (the stop's spec model, the spec)

_SAMPLERS: dict[str, SamplerFactory] = {}
_STOPPERS: dict[str, StopperFactory] = {}


def register_sampler(name: str, factory: SamplerFactory) -> None:
    """Run strategies whose ``sampler_name`` is ``name`` with ``factory(spec)``."""
    _SAMPLERS[name] = factory


def register_stopper(kind: str, factory: StopperFactory) -> None:
    """Run early stopping of spec ``type`` ``kind`` with ``factory(stop model, spec)``."""
    _STOPPERS[kind] = factory


def unregister(name: str) -> None:
    """Take a sampler or stopper out again (tests that register a toy plugin)."""
    _SAMPLERS.pop(name, None)
    _STOPPERS.pop(name, None)


def sampler_for(spec: SweepSpec) -> Sampler | None:
    """The sampler that suggests the spec's trials; None: a static design gives them."""
    factory = _SAMPLERS.get(sampler_of(spec))
    return factory(spec) if factory is not None else None


def stopper_for(spec: SweepSpec) -> Stopper | None:
    """The early stopping in force for the spec, if any."""
    stop: StopModel | None = stop_of(spec)
    if stop is None:
        return None
    factory = _STOPPERS.get(stop.type)
    if factory is None:
        raise LookupError(f"early stopping {stop.type!r} has a spec model but no stopper registered with the planner")
    return factory(stop, spec)


for _name in MODEL_TYPES:
    register_sampler(_name, ModelSearch)
# asha with sampler tpe: BOHB's TPE model per budget (search/bohb.py); strategy tpe stays Optuna's study.
register_sampler("tpe", lambda spec: Bohb(spec) if spec.strategy.type == "asha" else ModelSearch(spec))
register_stopper("hyperband", lambda stop, spec: Asha(stop.budget, stop.eta, stop.brackets, spec.metric.mode,
                                                      stop.promotion))
register_stopper("median", lambda stop, spec: Median(stop, spec.metric.mode))
register_stopper("pbt", Pbt)  # strategy pbt's segment decisions (search/pbt.py)
