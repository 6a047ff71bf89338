"""BOHB's sampler for ``asha`` with ``sampler: tpe``: a TPE model per budget.

Falkner, Klein and Hutter, "BOHB" (ICML 2018), section 4: configs come from
a model fitted at the largest budget with at least ``d + 3`` observations
(``d`` params), the most informative values it has enough of; a third of
configs (BOHB's ``random_fraction``), and every one before such a budget,
come from the spec's random design, so the search keeps exploring whatever
the model believes. The model is Optuna's ``TPESampler`` through its public
API (trials in flight as RUNNING constant liars); on a finite space no config
repeats. No state between calls: the same history, index and seed give the
same config (a restarted planner agrees).
"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState
from optuna.trial import create_trial

from spotsweep.services.planner.search.history import TrialRecord
from spotsweep.services.planner.search.model import Suggestion, derived_seed
from spotsweep.shared.optuna_space import distributions, from_optuna, to_optuna
from spotsweep.shared.space import config_params
from spotsweep.shared.spec import RandomStrategy, SweepSpec
from spotsweep.shared.spec_search import budget_of
from spotsweep.shared.spec_search.common import finite_size
from spotsweep.shared.states import IN_FLIGHT, TrialState

RANDOM_FRACTION = 1 / 3  # BOHB's default


class Bohb:
    """The sampler of ``asha`` with ``sampler: tpe`` (see the module)."""

    def __init__(self, spec: SweepSpec) -> None:
        budget = budget_of(spec)
        assert budget is not None and budget.param is not None, "BOHB needs successive halving's budget parameter"
        self._param, self._max = budget.param, budget.max
        self._space = spec.space
        self._distributions = distributions(spec.space)
        self._seed: int = getattr(spec.strategy, "seed", 0)
        self._minimize = spec.metric.mode == "min"
        self._min_points = len(spec.space) + 3
        self._size = finite_size(spec)
        self._random = spec.model_copy(update={"strategy": RandomStrategy(trials=1, seed=self._seed)})

    def values(self, record: TrialRecord) -> dict[int, float]:
        """A trial's finite values by budget: its rungs', and a completed trial's final value at max."""
        out = {int(b): v for b, v in record.rungs.items()}
        if record.state == TrialState.COMPLETED and record.values and record.params.get(self._param) == self._max:
            out.setdefault(self._max, record.values[0])
        return {b: v for b, v in out.items() if math.isfinite(v)}

    def model_budget(self, history: Sequence[TrialRecord]) -> int | None:
        """The largest budget with enough observations for a model; None: none has."""
        counts = Counter(b for r in history for b in self.values(r))
        enough = [b for b, n in counts.items() if n >= self._min_points]
        return max(enough) if enough else None

    def suggest(self, history: Sequence[TrialRecord], index: int,
                study_attrs: Mapping[str, Any] | None = None) -> Suggestion:
        tried = {_key(self._config(r.params)) for r in history}
        budget = self.model_budget(history)
        if budget is None or random.Random(derived_seed(self._seed, index)).random() < RANDOM_FRACTION:
            return Suggestion(self._untried(index, tried), attrs={"bohb": "random"})
        params = self._model(history, budget, index)
        if self._size is not None and _key(params) in tried:
            return Suggestion(self._untried(index, tried), attrs={"bohb": f"random (tpe@{budget} repeated a config)"})
        return Suggestion(params, attrs={"bohb": f"tpe@{budget}"})

    def _model(self, history: Sequence[TrialRecord], budget: int, index: int) -> dict[str, Any]:
        sampler = optuna.samplers.TPESampler(seed=derived_seed(self._seed, index), n_startup_trials=0,
                                             constant_liar=True)
        study = optuna.create_study(sampler=sampler, direction="minimize" if self._minimize else "maximize")
        for r in history:
            value = self.values(r).get(budget)
            params = to_optuna(self._space, self._config(r.params))
            if value is not None:
                study.add_trial(create_trial(state=OptunaState.COMPLETE, value=value, params=params,
                                             distributions=self._distributions))
            elif r.state in IN_FLIGHT and int(r.params.get(self._param, 0)) < budget:
                study.add_trial(create_trial(state=OptunaState.RUNNING, params=params,
                                             distributions=self._distributions))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            trial = study.ask(fixed_distributions=self._distributions)
        return from_optuna(self._space, trial.params)

    def _untried(self, index: int, tried: set[tuple[tuple[str, Any], ...]]) -> dict[str, Any]:
        """The spec's random design: on a finite space its first config not tried yet."""
        if self._size is None:
            return config_params(self._random, index)
        for k in range(self._size):
            params = config_params(self._random, k)
            if _key(params) not in tried:
                return params
        return config_params(self._random, index % self._size)  # all tried: more trials than configs

    def _config(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: params[k] for k in self._space if k in params}


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, (type(v).__name__, v)) for k, v in params.items()))
