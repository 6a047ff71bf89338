"""Which parameters matter, and which pairs interact, over a sweep's trials.

The completed trials become Optuna trials (``optuna.trial.create_trial``
with the distributions the planner samples from,
:mod:`spotsweep.services.planner.search.distributions`). Two methods:

``fanova`` (the default): the functional ANOVA of Hutter et al. (ICML 2014),
as Optuna's ``FanovaImportanceEvaluator`` does it (a scikit-learn random
forest fitted on Optuna's search-space transform), with the decomposition
estimated numerically on the fitted forest instead of by walking its trees:
``f_a(v)`` is the forest's mean prediction over uniform random points of the
space with ``a`` set to ``v``; a parameter's importance is ``Var f_a /
Var f``, a pair's interaction the variance of ``f_ab`` beyond ``f_a`` and
``f_b`` (``f_ab - f_a - f_b + mean``) over ``Var f``. Why not Optuna's own:
its exact tree walk takes 29 s for 1,000 trials and six parameters on this
machine (and it has no pairs); this takes well under a second, so the
dashboard can afford interactions. Both are shares of one variance, so a
main effect and an interaction compare; they are not normalised to sum to
1. Log-scale ranges are sampled and split in log space (each decade weighs
alike, as the sampler explores them: Optuna's evaluator splits them raw,
where a loguniform ``lr`` barely registers); choices are one-hot columns.

``ped-anova``: Optuna's ``PedAnovaImportanceEvaluator`` (which parameters
set the top 10% of trials apart), main effects only, normalised by Optuna.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

from spotsweep.services.planner.search.distributions import distributions, to_optuna
from spotsweep.shared.nonfinite import finite
from spotsweep.shared.spec import Param

MIN_TRIALS = 4
MAX_TRIALS = 1000  # a seeded sample beyond this: fit and marginals take about 0.3 s of CPU here
TREES = 32
PAIR_CANDIDATES = 6  # pairs among the most important parameters only (15 pairs)
BACKGROUND = 128  # uniform random points the marginals average over
GRID, PAIR_GRID = 16, 8  # values per numeric parameter: alone, in a pair
METHODS = ("fanova", "ped-anova")


@dataclass(frozen=True)
class Importance:
    metric: str
    params: list[tuple[str, float]] = field(default_factory=list)  # most important first
    interactions: list[tuple[tuple[str, str], float]] = field(default_factory=list)  # strongest first
    trials: int = 0  # completed trials with a finite value that were used
    method: str = "fanova"
    reason: str | None = None  # why the answer is empty


def study_trials(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str,
                 dists: Mapping[str, BaseDistribution]) -> list[optuna.trial.FrozenTrial]:
    """Completed trials with a finite ``metric`` as Optuna trials over the
    parameters in ``dists``; smoke trials, and trials whose params are
    outside the space (an ``extend`` that changed it), are left out."""
    return [optuna.trial.create_trial(params=p, distributions=dict(dists), value=v)
            for p, v in zip(*usable_params(space, rows, metric, dists))]


def usable_params(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str,
                  dists: Mapping[str, BaseDistribution]) -> tuple[list[dict[str, Any]], list[float]]:
    """What :func:`study_trials` keeps, as Optuna's params and the values,
    without building an Optuna trial each (``create_trial`` validates every
    trial: a third of a second for 2,000, which the forest does not need)."""
    params_out: list[dict[str, Any]] = []
    values: list[float] = []
    for row in rows:
        if row.get("state") != "completed" or row.get("smoke"):
            continue
        value = finite((row.get("metrics") or {}).get(metric))
        if value is None:
            continue
        try:
            params = to_optuna(space, row.get("params") or {})
            kept = {k: params[k] for k in dists}
            if not all(d._contains(d.to_internal_repr(kept[k])) for k, d in dists.items()):
                continue
        except (KeyError, ValueError, TypeError):
            continue
        params_out.append(kept)
        values.append(value)
    return params_out, values


class _Space:
    """Optuna's search-space transform (log ranges in log space, choices
    one-hot), plus uniform sampling and grids in that space."""

    def __init__(self, dists: Mapping[str, BaseDistribution]) -> None:
        from optuna._transform import _SearchSpaceTransform  # Optuna's, as its evaluators encode

        self.dists = dict(dists)
        self.trans = _SearchSpaceTransform(self.dists, transform_log=True, transform_step=False)
        self.columns: list[np.ndarray] = list(self.trans.column_to_encoded_columns)

    def categorical(self, i: int) -> bool:
        return isinstance(list(self.dists.values())[i], CategoricalDistribution)

    def encode(self, params: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return np.array([self.trans.transform(dict(p)) for p in params])

    def grid(self, i: int, n: int) -> np.ndarray:
        """Values of parameter ``i`` (encoded columns) spread evenly over its range: every choice, or ``n`` bin centres."""
        cols = self.columns[i]
        if self.categorical(i):
            return np.eye(len(cols))
        low, high = self.trans.bounds[cols[0]]
        return (low + (np.arange(n) + 0.5) * (high - low) / n).reshape(-1, 1)

    def uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = np.empty((n, len(self.trans.bounds)))
        for i, cols in enumerate(self.columns):
            if self.categorical(i):
                x[:, cols] = np.eye(len(cols))[rng.integers(0, len(cols), n)]
            else:
                low, high = self.trans.bounds[cols[0]]
                x[:, cols[0]] = rng.uniform(low, high, n)
        return x


def _marginal(model: Any, background: np.ndarray, cols: list[np.ndarray], values: list[np.ndarray]) -> np.ndarray:
    """The forest's mean prediction over ``background`` with the given
    parameters set, for every combination of their ``values``: shape (len(v1), len(v2), ...)."""
    combos = list(itertools.product(*values))
    x = np.repeat(background[None, :, :], len(combos), axis=0)
    for k, combo in enumerate(combos):
        for c, v in zip(cols, combo):
            x[k][:, c] = v
    pred = model.predict(x.reshape(-1, background.shape[1])).reshape(len(combos), len(background)).mean(axis=1)
    return pred.reshape(*(len(v) for v in values))


def _fanova(space: _Space, params: list[dict[str, Any]], values: list[float],
            seed: int) -> tuple[list[float], dict[tuple[int, int], float]]:
    from sklearn.ensemble import RandomForestRegressor  # what Optuna's fANOVA fits

    model = RandomForestRegressor(n_estimators=TREES, min_samples_leaf=2, random_state=seed, n_jobs=1)
    model.fit(space.encode(params), np.array(values, dtype=float))
    rng = np.random.default_rng(seed)
    total = float(np.var(model.predict(space.uniform(2048, rng))))
    background = space.uniform(BACKGROUND, rng)
    if total <= 0:
        return [0.0] * len(space.columns), {}
    main = [float(np.var(_marginal(model, background, [space.columns[i]], [space.grid(i, GRID)]))) / total
            for i in range(len(space.columns))]
    top = sorted(sorted(range(len(main)), key=lambda i: -main[i])[:PAIR_CANDIDATES])
    pairs = {}
    for a, b in itertools.combinations(top, 2):
        table = _marginal(model, background, [space.columns[a], space.columns[b]],
                          [space.grid(a, PAIR_GRID), space.grid(b, PAIR_GRID)])
        residual = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
        pairs[(a, b)] = float(np.mean(residual**2)) / total
    return main, pairs


def _ped_anova(trials: list[optuna.trial.FrozenTrial], direction: str) -> dict[str, float]:
    study = optuna.create_study(direction="minimize" if direction == "min" else "maximize")
    study.add_trials(trials)
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    return {k: float(v) for k, v in optuna.importance.get_param_importances(study, evaluator=evaluator).items()}


def importance(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str, mode: str = "min",
               method: str = "fanova", seed: int = 0) -> Importance:
    """Main effects and (fANOVA) the strongest pairwise interactions of
    ``metric`` over the completed trials; an empty answer with the reason
    when they cannot be told (too few trials, nothing varies)."""
    dists = distributions(space)
    varied = {k: d for k, d in dists.items() if not d.single()}
    usable = [r for r in rows if r.get("state") == "completed" and not r.get("smoke")
              and finite((r.get("metrics") or {}).get(metric)) is not None]
    if len(usable) > MAX_TRIALS:  # sampled before building trials: create_trial validates each one
        usable = random.Random(seed).sample(usable, MAX_TRIALS)
    params, values = usable_params(space, usable, metric, varied)
    empty = Importance(metric, trials=len(values), method=method)
    if len(values) < MIN_TRIALS:
        reason = f"{len(values)} completed trial(s) with a finite {metric!r}; importance needs at least {MIN_TRIALS}"
        return Importance(**{**empty.__dict__, "reason": reason})
    if not varied:
        return Importance(**{**empty.__dict__, "reason": "no parameter of the space takes more than one value"})
    if len(set(values)) == 1:
        return Importance(**{**empty.__dict__, "reason": f"every trial has the same {metric!r}: nothing to explain"})
    fixed = [(k, 0.0) for k in dists if k not in varied]
    names = list(varied)
    if method == "ped-anova":
        trials = [optuna.trial.create_trial(params=p, distributions=dict(varied), value=v) for p, v in zip(params, values)]
        shares = _ped_anova(trials, mode)
        main = sorted(((n, shares.get(n, 0.0)) for n in names), key=lambda p: -p[1])
        return Importance(metric, main + fixed, [], len(values), method)
    main_shares, pair_shares = _fanova(_Space(varied), params, values, seed)
    main = sorted(zip(names, main_shares), key=lambda p: -p[1])
    pairs = sorted((((names[a], names[b]), v) for (a, b), v in pair_shares.items()), key=lambda p: -p[1])
    return Importance(metric, main + fixed, pairs, len(values), method)


def as_json(result: Importance) -> dict[str, Any]:
    """``GET /api/sweeps/<id>/importance``'s body."""
    body: dict[str, Any] = {
        "metric": result.metric,
        "params": [{"name": n, "importance": v} for n, v in result.params],
        "interactions": [{"params": list(p), "importance": v} for p, v in result.interactions],
        "trials": result.trials,
        "method": result.method,
    }
    if result.reason is not None:
        body["reason"] = result.reason
    return body


def load() -> None:
    """Import scikit-learn's forest and Optuna's importance now (2 to 3 s on
    a small machine), so that no request waits for them: the dashboard
    calls this when it makes its app, before it serves."""
    import optuna.importance  # noqa: F401
    from optuna import _transform  # noqa: F401
    from sklearn import ensemble  # noqa: F401
