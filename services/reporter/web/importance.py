"""Which parameters matter, and which pairs interact, over a sweep's trials
(docs/dashboard.md, "Parameter importance and interactions", says how and why).

``fanova``'s main effects are Optuna's ``FanovaImportanceEvaluator`` up to
:data:`EXACT_TRIALS` trials; beyond, its exact tree walk is too slow for a
page, so the same decomposition is estimated on a forest fitted as Optuna
fits it: ``f_a(v)`` is the forest's mean prediction over uniform random
points of the space with ``a`` set to ``v``, a share ``Var f_a / Var f``,
and a pair's interaction (always estimated) ``f_ab - f_a - f_b + mean``.
Log-scale ranges are given to either as ``log10`` of the value.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from spotsweep.shared.optuna_space import distributions, to_optuna
from spotsweep.shared.nonfinite import finite
from spotsweep.shared.spec import Param

MIN_TRIALS = 4
RELIABLE = 20  # fewer trials than this (or five per parameter): the answer carries a caution
EXACT_TRIALS = 100  # up to this many, main effects are Optuna's evaluator itself (about a second)
NOISE = 1e-3  # interactions with a smaller share are not shown
MAX_TRIALS = 1000  # a seeded sample beyond this: fit and marginals take about 0.3 s of CPU here
TREES = 64  # as Optuna's FanovaImportanceEvaluator fits its forest
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
    caution: str | None = None  # why the answer may be rough (few trials)


def usable_params(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str,
                  dists: Mapping[str, BaseDistribution]) -> tuple[list[dict[str, Any]], list[float]]:
    """The trials (:func:`importance` picks the completed ones) with a finite ``metric``, as
    Optuna's params over the parameters in ``dists`` and the values; trials whose params
    are outside the space (an ``extend`` that changed it) are left out. No Optuna
    trial is built (``create_trial`` validates each: a third of a second for 2,000,
    which the forest does not need)."""
    params_out: list[dict[str, Any]] = []
    values: list[float] = []
    for row in rows:
        value = finite((row.get("metrics") or {}).get(metric))
        if value is None:
            continue
        try:
            params = to_optuna(space, row.get("params") or {})
            kept = {k: params[k] for k in dists}
            if not all(_inside(d, kept[k]) for k, d in dists.items()):
                continue
        except (KeyError, ValueError, TypeError):
            continue
        params_out.append(kept)
        values.append(value)
    return params_out, values


def _inside(d: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is one ``d`` gives, as Optuna's ``create_trial`` checks it: a choice (``to_internal_repr``
    raises ValueError for any other), or a number in the range and on its step."""
    x = d.to_internal_repr(value)
    if isinstance(d, IntDistribution):
        return d.low <= x <= d.high and (x - d.low) % d.step == 0
    if isinstance(d, FloatDistribution):
        k = (x - d.low) / d.step if d.step is not None else 0.0
        return d.low <= x <= d.high and abs(k - round(k)) < 1e-8
    return True


def _decades(dists: Mapping[str, BaseDistribution],
             params: list[dict[str, Any]]) -> tuple[dict[str, BaseDistribution], list[dict[str, Any]]]:
    """The log-scale ranges as plain ranges of ``log10`` of the value (each
    decade weighs alike), everything else as it is."""
    logs = {k for k, d in dists.items() if isinstance(d, (FloatDistribution, IntDistribution)) and d.log}
    out = {k: FloatDistribution(math.log10(d.low), math.log10(d.high)) if k in logs else d  # type: ignore[attr-defined]
           for k, d in dists.items()}
    return out, [{k: math.log10(v) if k in logs else v for k, v in p.items()} for p in params]


class _Space:
    """The forest's encoding of the parameters (Optuna's: a range is one
    column, a choice one-hot columns), with uniform sampling and grids."""

    def __init__(self, dists: Mapping[str, BaseDistribution]) -> None:
        self.dists = list(dists.items())
        self.columns: list[np.ndarray] = []
        self.width = 0
        for _, d in self.dists:
            n = len(d.choices) if isinstance(d, CategoricalDistribution) else 1
            self.columns.append(np.arange(self.width, self.width + n))
            self.width += n

    def categorical(self, i: int) -> bool:
        return isinstance(self.dists[i][1], CategoricalDistribution)

    def bounds(self, i: int) -> tuple[float, float]:
        d = self.dists[i][1]
        return float(d.low), float(d.high)  # type: ignore[attr-defined]

    def encode(self, params: Sequence[Mapping[str, Any]]) -> np.ndarray:
        x = np.zeros((len(params), self.width))
        for i, (name, d) in enumerate(self.dists):
            for row, p in enumerate(params):
                if isinstance(d, CategoricalDistribution):
                    x[row, self.columns[i][int(d.to_internal_repr(p[name]))]] = 1.0
                else:
                    x[row, self.columns[i][0]] = float(p[name])
        return x

    def grid(self, i: int, n: int) -> np.ndarray:
        """Values of parameter ``i`` (encoded columns) spread evenly over its range: every choice, or ``n`` bin centres."""
        if self.categorical(i):
            return np.eye(len(self.columns[i]))
        low, high = self.bounds(i)
        return (low + (np.arange(n) + 0.5) * (high - low) / n).reshape(-1, 1)

    def uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = np.empty((n, self.width))
        for i, cols in enumerate(self.columns):
            if self.categorical(i):
                x[:, cols] = np.eye(len(cols))[rng.integers(0, len(cols), n)]
            else:
                x[:, cols[0]] = rng.uniform(*self.bounds(i), n)
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

    model = RandomForestRegressor(n_estimators=TREES, max_depth=64, min_samples_split=2, min_samples_leaf=1,
                                  random_state=seed, n_jobs=1)
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


def _optuna(method: str, dists: Mapping[str, BaseDistribution], params: list[dict[str, Any]], values: list[float],
            direction: str, seed: int) -> dict[str, float]:
    """Optuna's own evaluator's main effects (normalised to sum to 1)."""
    trials = [optuna.trial.create_trial(params=p, distributions=dict(dists), value=v) for p, v in zip(params, values)]
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line in `spotsweep report`'s output
    study = optuna.create_study(direction="minimize" if direction == "min" else "maximize")
    study.add_trials(trials)
    evaluator = (optuna.importance.PedAnovaImportanceEvaluator() if method == "ped-anova"
                 else optuna.importance.FanovaImportanceEvaluator(seed=seed))
    return {k: float(v) for k, v in optuna.importance.get_param_importances(study, evaluator=evaluator).items()}


def importance(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str, mode: str = "min",
               method: str = "fanova", seed: int = 0) -> Importance:
    """Main effects (shares in [0, 1] summing to 1) and (fANOVA) the strongest
    pairwise interactions of ``metric`` over the completed trials; an empty
    answer with the reason when they cannot be told (too few trials, nothing
    varies), a caution when they are rough."""
    dists = distributions(space)
    varied = {k: d for k, d in dists.items() if not d.single()}
    usable = [r for r in rows if r.get("state") == "completed" and not r.get("smoke")
              and finite((r.get("metrics") or {}).get(metric)) is not None]
    if len(usable) > MAX_TRIALS:  # sampled before building trials: create_trial validates each one
        usable = random.Random(seed).sample(usable, MAX_TRIALS)
    params, values = usable_params(space, usable, metric, varied)
    reason = _untold(values, varied, metric)
    if reason is not None:
        return Importance(metric, trials=len(values), method=method, reason=reason)
    names = list(varied)
    dec, params = _decades(varied, params)
    enough = max(RELIABLE, 5 * len(names))
    caution = None if len(values) >= enough else (
        f"only {len(values)} completed trials for {len(names)} varied parameter(s): shares from so few are "
        f"rough (they move with the forest's seed); {enough} or more read better")
    shares, pairs = _shares(method, dec, params, values, mode, seed)
    main = sorted(((n, min(1.0, max(0.0, shares.get(n, 0.0)))) for n in names), key=lambda p: -p[1])
    fixed = [(k, 0.0) for k in dists if k not in varied]
    return Importance(metric, main + fixed, pairs, len(values), method, caution=caution)


def _untold(values: list[float], varied: Mapping[str, BaseDistribution], metric: str) -> str | None:
    """Why the trials' ``values`` cannot tell the parameters' importance; None when they can."""
    if len(values) < MIN_TRIALS:
        return f"{len(values)} completed trial(s) with a finite {metric!r}; importance needs at least {MIN_TRIALS}"
    if not varied:
        return "no parameter of the space takes more than one value"
    if len(set(values)) == 1:
        return f"every trial has the same {metric!r}: nothing to explain"
    return None


def _shares(method: str, dists: Mapping[str, BaseDistribution], params: list[dict[str, Any]], values: list[float],
            mode: str, seed: int) -> tuple[dict[str, float], list[tuple[tuple[str, str], float]]]:
    """(each parameter's main effect, the pairs' interactions above NOISE, strongest first) by ``method``."""
    if method == "ped-anova":
        return _optuna(method, dists, params, values, mode, seed), []
    names = list(dists)
    main_shares, pair_shares = _fanova(_Space(dists), params, values, seed)
    total = sum(main_shares)
    shares = (_optuna(method, dists, params, values, mode, seed) if len(values) <= EXACT_TRIALS
              else {n: v / total if total > 0 else 0.0 for n, v in zip(names, main_shares)})
    pairs = sorted((((names[a], names[b]), min(1.0, v)) for (a, b), v in pair_shares.items() if v >= NOISE),
                   key=lambda p: -p[1])
    return shares, pairs


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
    if result.caution is not None:
        body["caution"] = result.caution
    if result.method == "fanova" and not result.reason and not result.interactions:
        body["interactions_note"] = (f"no pair of parameters interacts above {NOISE:g} of the variance"
                                     if len(result.params) > 1 else "one varied parameter: no pairs")
    return body


def load() -> None:
    """Import scikit-learn's forest and Optuna's importance now (2 to 3 s on
    a small machine), so that no request waits for them: the dashboard
    calls this when it makes its app, before it serves."""
    import optuna.importance  # noqa: F401
    from sklearn import ensemble  # noqa: F401
