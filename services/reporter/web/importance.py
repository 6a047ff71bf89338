"""Which parameters matter, and which pairs interact: fANOVA over a sweep.

No new estimator: the completed trials become an in-memory Optuna study
(``optuna.trial.create_trial`` with the distributions the planner uses,
:mod:`spotsweep.services.planner.search.distributions`), and Optuna's fANOVA
(Hutter et al., ICML 2014: a random forest fitted to the objective, each
tree's prediction decomposed into the variance of its marginals) explains
the objective's variance:

* a parameter's importance is the share of the variance its marginal alone
  explains, averaged over trees (what ``FanovaImportanceEvaluator``
  computes, before it normalises the shares to sum to 1);
* a pair's interaction is the share the pair's joint marginal explains
  beyond the two alone, ``V(a, b) - V(a) - V(b)`` over the tree's variance,
  from the same trees (Optuna's ``_FanovaTree.get_marginal_variance``, the
  fANOVA internals; the public evaluator stops at single parameters).

Both are shares of one variance, so a main effect and an interaction can be
compared; they are not normalised. Choices are one-hot columns (Optuna's
search-space transform) and log-scale ranges are split in log space, so a
marginal over ``lr`` in [1e-5, 1e-1] weighs each decade alike, as the
sampler explores them.

The work is bounded so the dashboard answers in time: at most
:data:`MAX_TRIALS` trials (a seeded sample), shallow trees, and pairs among
the :data:`PAIR_CANDIDATES` most important parameters only.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution

from spotsweep.services.planner.search.distributions import distributions, to_optuna
from spotsweep.services.reporter.web.present import finite
from spotsweep.shared.spec import Param

MIN_TRIALS = 4
MAX_TRIALS = 1000
PAIR_CANDIDATES = 6
N_TREES = 32
MAX_DEPTH = 8


@dataclass(frozen=True)
class Importance:
    metric: str
    params: list[tuple[str, float]] = field(default_factory=list)  # best first
    interactions: list[tuple[tuple[str, str], float]] = field(default_factory=list)  # strongest first
    trials: int = 0  # completed trials with a finite value that were used
    reason: str | None = None  # why the answer is empty


def study_trials(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str,
                 dists: Mapping[str, BaseDistribution]) -> list[optuna.trial.FrozenTrial]:
    """Completed trials with a finite ``metric`` as Optuna trials over the
    parameters in ``dists`` (params in Optuna's terms); smoke trials, and
    trials whose params are outside the space (an ``extend`` that changed
    it), are left out."""
    out = []
    for row in rows:
        if row.get("state") != "completed" or row.get("smoke"):
            continue
        value = finite((row.get("metrics") or {}).get(metric))
        if value is None:
            continue
        try:
            params = to_optuna(space, row.get("params") or {})
            params = {k: params[k] for k in dists}
            out.append(optuna.trial.create_trial(params=params, distributions=dict(dists), value=value))
        except (KeyError, ValueError, TypeError):
            continue
    return out


def _fit(trials: list[optuna.trial.FrozenTrial], dists: Mapping[str, BaseDistribution], seed: int) -> Any:
    from optuna._transform import _SearchSpaceTransform
    from optuna.importance._fanova._fanova import _Fanova

    trans = _SearchSpaceTransform(dict(dists), transform_log=True, transform_step=False)
    x = np.array([trans.transform(t.params) for t in trials])
    y = np.array([t.value for t in trials], dtype=float)
    fanova = _Fanova(n_trees=N_TREES, max_depth=MAX_DEPTH, min_samples_split=2, min_samples_leaf=1, seed=seed)
    fanova.fit(X=x, y=y, search_spaces=trans.bounds, column_to_encoded_columns=trans.column_to_encoded_columns)
    return fanova, trans.column_to_encoded_columns


def _pair_share(fanova: Any, columns: list[np.ndarray], a: int, b: int) -> float:
    """The pair's joint share beyond the two alone, averaged over trees with variance."""
    fanova._compute_variances(a)
    fanova._compute_variances(b)
    joint = np.concatenate([columns[a], columns[b]])
    shares = []
    for i, tree in enumerate(fanova._trees):
        if tree.variance <= 0:
            continue
        v = tree.get_marginal_variance(joint) - fanova._variances[a][i] - fanova._variances[b][i]
        shares.append(max(0.0, v) / tree.variance)
    return float(np.mean(shares)) if shares else 0.0


def importance(space: Mapping[str, Param], rows: Sequence[Mapping[str, Any]], metric: str, seed: int = 0) -> Importance:
    """fANOVA main effects and the strongest pairwise interactions of
    ``metric`` over the sweep's completed trials; an empty answer with the
    reason when it cannot be told (too few trials, nothing varies)."""
    dists = distributions(space)
    varied = {k: d for k, d in dists.items() if not d.single()}
    trials = study_trials(space, rows, metric, varied)
    if len(trials) < MIN_TRIALS:
        return Importance(metric, trials=len(trials), reason=f"{len(trials)} completed trial(s) with a finite {metric!r};"
                                                             f" importance needs at least {MIN_TRIALS}")
    if not varied:
        return Importance(metric, trials=len(trials), reason="no parameter of the space takes more than one value")
    if len({t.value for t in trials}) == 1:
        return Importance(metric, trials=len(trials), reason=f"every trial has the same {metric!r}: nothing to explain")
    if len(trials) > MAX_TRIALS:
        trials = random.Random(seed).sample(trials, MAX_TRIALS)
    names = list(varied)
    fanova, columns = _fit(trials, varied, seed)
    main = [(name, fanova.get_importance(i)[0]) for i, name in enumerate(names)]
    main.sort(key=lambda p: -p[1])
    shares = dict(main)
    top = sorted(range(len(names)), key=lambda i: -shares[names[i]])[:PAIR_CANDIDATES]
    pairs = [((names[a], names[b]), _pair_share(fanova, columns, a, b)) for a, b in itertools.combinations(sorted(top), 2)]
    pairs.sort(key=lambda p: -p[1])
    fixed = [(k, 0.0) for k in dists if k not in varied]
    return Importance(metric, main + fixed, pairs, len(trials))


def as_json(result: Importance) -> dict[str, Any]:
    """``GET /api/sweeps/<id>/importance``'s body."""
    body: dict[str, Any] = {
        "metric": result.metric,
        "params": [{"name": n, "importance": v} for n, v in result.params],
        "interactions": [{"params": list(p), "importance": v} for p, v in result.interactions],
        "trials": result.trials,
        "method": "fANOVA (Optuna): shares of the objective's variance",
    }
    if result.reason is not None:
        body["reason"] = result.reason
    return body
