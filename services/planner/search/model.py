"""Model-based suggestions (tpe, gp, cmaes, nsga2) through Optuna's ask-and-tell.

Nothing lives in memory between two suggestions: each builds an in-memory
study from the history the planner passes and returns the params with the
attributes the sampler wrote, which the planner persists and passes back, so
the search survives a restart. The seed is derived from ``(strategy.seed,
index)``: the same history, index and seed give the same suggestion, however
many a planner made before. Trials in flight enter as RUNNING, so parallel
suggestions do not collapse (docs/search.md tells how each sampler uses them);
a suggestion equal to a trial in flight is asked again.
"""

from __future__ import annotations

import hashlib
import math
import importlib.util
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.samplers import BaseSampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState as OptunaState
from optuna.trial import create_trial

from spotsweep.services.planner.search.history import TrialRecord
from spotsweep.shared.errors import SpecError
from spotsweep.shared.optuna_space import distributions, from_optuna, to_optuna
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.space import sampler_of
from spotsweep.shared.spec_search import MODEL_TYPES
from spotsweep.shared.states import IN_FLIGHT, TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a study is built per suggestion: no "study created" lines

_DUPLICATE_TRIES = 5
GP_NEEDS_TORCH = ("gp needs torch, which is not installed where the planner runs: pip install 'spotsweep[gp]' "
                  "(the CPU build is enough), or use strategy tpe")


@dataclass(frozen=True)
class Suggestion:
    """Params for a new trial; ``attrs`` go with the trial, ``study_attrs`` with the sweep."""

    params: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    study_attrs: dict[str, Any] = field(default_factory=dict)


def derived_seed(seed: int, index: int, attempt: int = 0) -> int:
    """A stable 32-bit seed per (spec seed, trial index, attempt)."""
    return int.from_bytes(hashlib.sha256(f"spotsweep:{seed}:{index}:{attempt}".encode()).digest()[:4], "big")


class ModelSearch:
    """Suggests trial params from history with the spec's Optuna sampler."""

    def __init__(self, spec: SweepSpec) -> None:
        strategy = spec.strategy
        self._kind = sampler_of(spec)  # tpe, gp, cmaes, nsga2 (strategy of that type, or asha's sampler)
        if self._kind not in MODEL_TYPES:
            raise ValueError(f"strategy {strategy.type} does not use a model")
        # Optuna's options, where the strategy's model has them (asha's tpe takes Optuna's defaults).
        self._startup: int | None = getattr(strategy, "startup_trials", None)
        self._population: int | None = getattr(strategy, "population", None)
        if self._kind == "gp" and importlib.util.find_spec("torch") is None:
            raise SpecError([("strategy.type", GP_NEEDS_TORCH)])
        self._seed: int = getattr(strategy, "seed", 0)
        self._space = spec.space
        self._distributions = distributions(spec.space)
        metrics = spec.objectives or [spec.metric]
        self._directions = [StudyDirection.MINIMIZE if m.mode == "min" else StudyDirection.MAXIMIZE for m in metrics]

    def sampler(self, index: int, attempt: int = 0) -> BaseSampler:
        seed = derived_seed(self._seed, index, attempt)
        kind = self._kind
        if kind == "tpe":
            return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=self._startup_or(10))
        if kind == "gp":
            return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False, n_startup_trials=self._startup_or(10))
        if kind == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, popsize=self._population, warn_independent_sampling=False,
                                                n_startup_trials=self._startup_or(1))
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=self._population or 50)

    def _startup_or(self, default: int) -> int:
        """``startup_trials``, or Optuna's default for the sampler."""
        return default if self._startup is None else self._startup

    def study(self, history: Sequence[TrialRecord], index: int, study_attrs: Mapping[str, Any] | None = None,
              attempt: int = 0, storage: InMemoryStorage | None = None) -> optuna.Study:
        """The in-memory study that ``history`` describes (public for tests and tools), in ``storage`` when given."""
        storage = storage or InMemoryStorage()
        study = optuna.create_study(storage=storage, sampler=self.sampler(index, attempt), directions=self._directions)
        study_id = storage.get_study_id_from_name(study.study_name)
        for key, value in (study_attrs or {}).items():
            storage.set_study_system_attr(study_id, key, value)
        for record in sorted(history, key=lambda r: r.index):
            study.add_trial(self._frozen(record))
        return study

    def suggest(self, history: Sequence[TrialRecord], index: int,
                study_attrs: Mapping[str, Any] | None = None) -> Suggestion:
        """Params for trial ``index`` given every trial launched before it.

        A suggestion equal to a trial in flight (a genetic sampler's child can
        repeat a parent) is asked again with the next seed, a few times.
        """
        in_flight = {_key(to_optuna(self._space, r.params)) for r in history if r.state in IN_FLIGHT}
        for attempt in range(_DUPLICATE_TRIES):
            storage = InMemoryStorage()  # ours: its study attributes are read back below (no Optuna private member)
            study = self.study(history, index, study_attrs, attempt, storage)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                trial = study.ask(fixed_distributions=self._distributions)
            if _key(trial.params) not in in_flight:
                break
        frozen = study.get_trials(deepcopy=False)[-1]
        return Suggestion(
            params=from_optuna(self._space, trial.params),
            attrs=dict(frozen.system_attrs),
            study_attrs=dict(storage.get_study_system_attrs(storage.get_study_id_from_name(study.study_name))),
        )

    def _frozen(self, record: TrialRecord) -> optuna.trial.FrozenTrial:
        state, values = _state(record, len(self._directions))
        return create_trial(
            state=state,
            values=values,
            params=to_optuna(self._space, record.params),
            distributions=self._distributions,
            # A pruned trial's values as it reported them: at each step while
            # running, or at each successive-halving rung decided.
            intermediate_values={int(step): float(v) for step, v in {**record.rungs, **record.curve}.items()},
            system_attrs=dict(record.attrs),
        )


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def _state(record: TrialRecord, objectives: int) -> tuple[OptunaState, list[float] | None]:
    """Our trial state as Optuna's: in flight -> RUNNING (what constant liar sees);
    completed without the objective(s), with a NaN (Optuna's tell fails such a
    trial) or an infinite one (a diverged run), or failed -> FAIL (samplers skip it).

    A trial that successive halving relaunches (a budget parameter) is known by
    its rung values before it ends: waiting at a rung (``paused``) or promoted and
    in flight, it is PRUNED for the sampler, which ranks it by its value at its
    highest step, as Optuna's own pruners leave a trial that stopped there. As
    RUNNING, constant liar would count the promoted ones, the best so far, as
    the worst, and as FAIL the waiting ones would tell nothing: TPE then steered
    away from its best configs (bench/search.py --peers, docs/benchmarks.md)."""
    if record.rungs and (record.state in IN_FLIGHT or record.state == TrialState.PAUSED):
        top = max(record.rungs)
        return (OptunaState.PRUNED if math.isfinite(record.rungs[top]) else OptunaState.FAIL), None
    if record.state in IN_FLIGHT:
        return OptunaState.RUNNING, None
    if record.state == TrialState.PRUNED:
        return OptunaState.PRUNED, None
    if (record.state == TrialState.COMPLETED and record.values is not None and len(record.values) == objectives
            and all(math.isfinite(v) for v in record.values)):
        return OptunaState.COMPLETE, list(record.values)
    return OptunaState.FAIL, None
