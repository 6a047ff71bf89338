"""Mean and spread over seeds, for a sweep with ``repeats`` > 1.

With ``repeats: N`` each configuration runs N times, its param ``seed``
the repeat; one seed's result says little. The configs are grouped and
ranked as ``spotsweep report`` ranks them
(:func:`~spotsweep.services.reporter.summary.by_config`: params less
``seed``, mean of the objective over the seeds that completed, sample
standard deviation), and for the best few :func:`mean_curve` averages the
seeds' learning curves step by step: the mean, a band of one standard
deviation either side, and how many seeds reported the step (a seed that
stopped early, or a NaN, leaves a step to the others).

Pure functions over rows of ``trial_results`` and curves from
:func:`.queries.curves`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from spotsweep.services.reporter.summary import ConfigSummary, by_config, config_key
from spotsweep.services.reporter.web.downsample import lttb


def label(params: Mapping[str, Any]) -> str:
    """``lr=0.001 opt=adam``: a config's params less ``seed``, for legends."""
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "seed")


def members(rows: Sequence[Mapping[str, Any]], configs: Sequence[ConfigSummary]) -> list[list[Mapping[str, Any]]]:
    """The trials (seeds) of each of ``configs`` among ``rows``, by seed (one pass over the rows)."""
    wanted = {config_key(c.params): i for i, c in enumerate(configs)}
    out: list[list[Mapping[str, Any]]] = [[] for _ in configs]
    for row in rows:
        i = wanted.get(config_key(row["params"]))
        if i is not None:
            out[i].append(row)
    return [sorted(group, key=lambda r: repr(r["params"].get("seed"))) for group in out]


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
        mean = statistics.fmean(values)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        rows[step] = [step, mean, mean - std, mean + std, len(values)]
    kept = lttb([(float(r[0]), float(r[1])) for r in rows.values()], max_points)
    return [rows[int(step)] for step, _ in kept]


def summary_json(rows: Sequence[Mapping[str, Any]], metric: str, mode: str,
                 repeats: int) -> tuple[dict[str, Any], list[ConfigSummary]]:
    """The configs, best mean first, as ``GET /api/sweeps/<id>/seeds`` lists
    them (without curves; a ``reason`` when there is nothing to group), and
    the configs themselves."""
    body: dict[str, Any] = {"metric": metric, "mode": mode, "repeats": repeats, "configs": [], "curves": []}
    if repeats <= 1:
        return {**body, "reason": "the sweep runs each config once (repeats: 1): no spread over seeds to show"}, []
    configs = by_config(rows, metric, mode)
    if not configs:
        return {**body, "reason": f"no config has a completed seed with {metric!r} yet"}, []
    body["configs"] = [{"label": label(c.params), "params": c.params, "mean": c.mean, "std": c.std, "n": c.n,
                        "runs": c.runs, "seeds": list(c.seeds)} for c in configs]
    return body, configs
