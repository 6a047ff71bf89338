"""What a report adds up over trials: repeats of one config (with ``repeats: N``
every config runs with N seeds, param ``seed``; one seed's result says little),
and the sweep's cost. Pure functions over rows of the ``trial_results`` view.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotsweep.services.reporter.values import metric_float, rank_key


@dataclass(frozen=True)
class ConfigSummary:
    params: dict[str, Any]  # the config's params, ``seed`` left out
    mean: float
    std: float | None  # sample standard deviation over seeds; None with one seed
    n: int  # seeds that reported the metric
    runs: int  # trials of this config (seeds), reported or not
    seeds: tuple[Any, ...]  # the seeds that reported
    trial_ids: tuple[str, ...] = ()  # every trial of the config (reported or not), by seed, when the rows name them


def config_key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A config's identity: its params less ``seed``, compared by repr."""
    # repr keeps 1, 1.0 and True apart (they are == and hash alike)
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != "seed"))


def summarise(params: Mapping[str, Any], values: Sequence[float], seeds: Sequence[Any], runs: int,
              trial_ids: Sequence[str] = ()) -> ConfigSummary:
    """One config from its seeds' values (non-finite ones too): the mean and
    the sample standard deviation (None with one seed, or when a value is
    not finite), in floats (statistics.stdev's exact fractions cost 70 us a config)."""
    mean = statistics.fmean(values)
    finite = all(math.isfinite(v) for v in values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 and finite else None
    return ConfigSummary(dict(params), mean, std, len(values), runs, tuple(seeds), tuple(trial_ids))


def ranked(configs: Sequence[ConfigSummary], mode: str) -> list[ConfigSummary]:
    """Best mean first; a non-finite mean last."""
    return sorted(configs, key=lambda c: rank_key(c.mean, mode))


def by_config(rows: Sequence[Mapping[str, Any]], metric: str, mode: str) -> list[ConfigSummary]:
    """Configs with at least one seed that completed with ``metric``, best mean first.
    A seed that diverged (NaN, an infinity) makes its config's mean non-finite: ranked last."""
    groups: dict[tuple[tuple[str, str], ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(config_key(row["params"]), []).append(row)
    out = []
    for members in groups.values():
        good = [(r, v) for r in members if r["state"] == "completed"
                and (v := metric_float((r["metrics"] or {}).get(metric))) is not None]
        if not good:
            continue
        params = {k: v for k, v in members[0]["params"].items() if k != "seed"}
        seeded = sorted(members, key=lambda r: repr(r["params"].get("seed")))
        out.append(summarise(params, [v for _, v in good], [r["params"].get("seed") for r, _ in good], len(members),
                             [str(r["trial_id"]) for r in seeded if r.get("trial_id") is not None]))
    return ranked(out, mode)


@dataclass(frozen=True)
class SweepCost:
    gpu_hours: float
    cost: float | None
    on_demand: float | None


def cost_of(rows: Sequence[Mapping[str, Any]], gpus: int, pricing: Mapping[str, Any] | None) -> SweepCost:
    """GPU-hours (and cost, on demand cost) from the trials' running time over all
    their attempts (``run_seconds``: time waiting in the queue is not counted; a
    CPU-only trial counts as one GPU, the slot it holds)."""
    seconds = sum(float(r.get("run_seconds") or 0.0) for r in rows)
    hours = seconds * max(1, gpus) / 3600
    if not pricing:
        return SweepCost(hours, None, None)
    on_demand = pricing.get("on_demand_gpu_hour")
    return SweepCost(hours, hours * float(pricing["gpu_hour"]), None if on_demand is None else hours * float(on_demand))
