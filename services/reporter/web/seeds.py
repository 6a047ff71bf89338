"""Mean and spread over seeds, for a sweep with ``repeats`` > 1: the configs
grouped in SQL (:func:`.queries.seed_groups`), summarised and ranked as
``spotsweep report`` does (:func:`~spotsweep.services.reporter.summary.summarise`),
and the best few's learning curves averaged step by step (:func:`mean_curve`).
Pure functions over rows of ``trial_results`` and curves from :func:`.queries.curves`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from spotsweep.services.reporter.summary import ConfigSummary, ranked, summarise
from spotsweep.services.reporter.web.downsample import lttb


def label(params: Mapping[str, Any]) -> str:
    """``lr=0.001 opt=adam``: a config's params less ``seed``, for legends."""
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "seed")


def mean_curve(curves: Sequence[Sequence[tuple[int, float | None]]], max_points: int) -> list[list[float | int]]:
    """``[[step, mean, low, high, n], ...]`` over the seeds' curves: at each
    step the mean of the finite values, mean ∓ their standard deviation (the
    mean itself with one value) and their count; at most ``max_points``
    steps, chosen by LTTB on the mean so the shape survives."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            if value is not None and math.isfinite(value):
                by_step.setdefault(step, []).append(value)
    rows: dict[int, list[float | int]] = {}
    for step in sorted(by_step):
        values = by_step[step]
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        rows[step] = [step, mean, mean - std, mean + std, len(values)]
    kept = lttb([(float(r[0]), float(r[1])) for r in rows.values()], max_points)
    return [rows[int(step)] for step, _ in kept]


def configs_of(groups: Sequence[Mapping[str, Any]], mode: str) -> list[ConfigSummary]:
    """Configs from :func:`.queries.seed_groups` rows, best mean first: those
    with a seed that completed with the metric. The ``params`` (less
    ``seed``) stay jsonb's text until :func:`table` shows them."""
    out = [summarise({"": g["config"]}, g["values"], g["seeds"], g["runs"], g["trial_ids"])
           for g in groups if g["values"]]
    return ranked(out, mode)


def params_of(config: ConfigSummary) -> dict[str, Any]:
    """The params of a config from :func:`configs_of` (jsonb's text, parsed)."""
    parsed = json.loads(config.params[""])
    return parsed if isinstance(parsed, dict) else {}


def summary_json(groups: Sequence[Mapping[str, Any]], metric: str, mode: str, repeats: int,
                 most: int) -> tuple[dict[str, Any], list[ConfigSummary]]:
    """The best ``most`` configs, best mean first, as ``GET /api/sweeps/<id>/seeds``
    lists them (without curves; a ``reason`` when there is nothing to group;
    ``total`` counts them all), and all the configs (:func:`configs_of`)."""
    body: dict[str, Any] = {"metric": metric, "mode": mode, "repeats": repeats, "configs": [], "curves": [], "total": 0}
    if repeats <= 1:
        return {**body, "reason": "the sweep runs each config once (repeats: 1): no spread over seeds to show"}, []
    configs = configs_of(groups, mode)
    if not configs:
        return {**body, "reason": f"no config has a completed seed with {metric!r} yet"}, []
    shown = []
    for c in configs[:most]:
        params = params_of(c)
        shown.append({"label": label(params), "params": params, "mean": c.mean, "std": c.std, "n": c.n, "runs": c.runs,
                      "seeds": list(c.seeds), "trials": list(c.trial_ids)})
    return {**body, "configs": shown, "total": len(configs)}, configs
