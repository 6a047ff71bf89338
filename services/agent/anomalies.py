"""Anomaly flags the agent raises while a trial runs: a pure decision over plain events.

The agent is the one that sees a trial live: every line of its metrics file
and every resource sample. :func:`decide` folds one event into a run's
:class:`Watch` and raises these flags (each once; what rose stays raised):

* ``nan``: a metric the trial reported is NaN or infinite (the contract's
  ``NaN``/``Infinity`` strings parse to those);
* ``stalled``: no line in the metrics file for :data:`STALL_FRACTION` of
  ``timeout.stall`` (the trial is killed at the whole of it);
* ``diverging``: the objective got well worse than its best so far
  (:func:`diverged` says what "well" is);
* ``idle_gpu``: the trial's GPU utilisation stayed under
  :data:`IDLE_GPU_PERCENT` for :data:`IDLE_GPU_SECONDS` (from ``sys/gpu_util``).

The planner adds ``preempted_often`` (:mod:`spotsweep.services.planner.flags`).
No clock and no I/O: times come in the events, so every rule is tested with
plain values (tests/services/agent/test_anomalies.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from spotsweep.services.agent.lines import Points  # the trial reported values at a step (one line)

STALL_FRACTION = 0.5  # `stalled` after this share of timeout.stall without a line
IDLE_GPU_PERCENT = 20.0  # `idle_gpu`: utilisation under this...
IDLE_GPU_SECONDS = 300.0  # ...for this long without a break
DIVERGE_FRACTION = 0.5  # `diverging`: worse than the best by more than this share of it...
DIVERGE_FLOOR = 1e-6  # ...with |best| taken as at least this, so a best of 0 is not "any change"
SYS_PREFIX = "sys/"  # the agent's own resource metrics: never the trial's values


def diverged(best: float, value: float, mode: Literal["min", "max"] = "min") -> bool:
    """Whether ``value`` is well worse than ``best``: by more than :data:`DIVERGE_FRACTION`
    of ``max(|best|, DIVERGE_FLOOR)``. A loss whose best was 2.0 diverges past 3.0; an
    accuracy (``max``) whose best was 0.8 below 0.4. Non-finite values are ``nan``'s, not this."""
    if not (math.isfinite(best) and math.isfinite(value)):
        return False
    worse = value - best if mode == "min" else best - value
    return worse > DIVERGE_FRACTION * max(abs(best), DIVERGE_FLOOR)


def stalled(silent_for: float, stall_timeout: float | None) -> bool:
    """Whether a run silent for ``silent_for`` seconds counts as stalled (half of timeout.stall)."""
    return stall_timeout is not None and silent_for >= STALL_FRACTION * stall_timeout


def idle_since(since: float | None, at: float, gpu_util: float) -> float | None:
    """When the current stretch of low GPU utilisation began, after a sample at ``at``; None when busy."""
    if not math.isfinite(gpu_util) or gpu_util >= IDLE_GPU_PERCENT:
        return None
    return at if since is None else since


@dataclass(frozen=True)
class Sample:
    """The agent sampled the trial's resources at ``at`` (seconds, any clock): ``sys/`` names to values."""

    at: float
    values: Mapping[str, float]


@dataclass(frozen=True)
class Silence:
    """At one poll, the trial had written no line for ``seconds``."""

    seconds: float


Event = Points | Sample | Silence


@dataclass(frozen=True)
class Watch:
    """One run's anomaly state: the flags raised (flag -> why), in the order they rose."""

    objective: str
    mode: Literal["min", "max"] = "min"
    stall_timeout: float | None = None
    flags: Mapping[str, str] = field(default_factory=dict)
    best: float | None = None  # the objective's best finite value so far
    idle_from: float | None = None  # start of the current low-utilisation stretch


def decide(watch: Watch, event: Event) -> Watch:
    """``watch`` after ``event``; a flag once raised stays (set semantics)."""
    if isinstance(event, Silence):
        return _silence(watch, event)
    if isinstance(event, Sample):
        return _sample(watch, event)
    return _points(watch, event)


def _silence(watch: Watch, event: Silence) -> Watch:
    """``stalled`` once the trial has been silent for half its stall timeout."""
    if "stalled" not in watch.flags and stalled(event.seconds, watch.stall_timeout):
        return _raise(watch, "stalled", f"no line in the metrics file for {event.seconds:.0f} s (half of "
                                        f"timeout.stall = {watch.stall_timeout:g} s kills the trial)")
    return watch


def _sample(watch: Watch, event: Sample) -> Watch:
    """``idle_gpu`` once GPU utilisation has stayed low for IDLE_GPU_SECONDS."""
    util = event.values.get("sys/gpu_util")
    if util is None:
        return watch
    since = idle_since(watch.idle_from, event.at, util)
    watch = replace(watch, idle_from=since)
    if "idle_gpu" not in watch.flags and since is not None and event.at - since >= IDLE_GPU_SECONDS:
        watch = _raise(watch, "idle_gpu", f"GPU utilisation under {IDLE_GPU_PERCENT:g}% for {event.at - since:.0f} s")
    return watch


def _points(watch: Watch, event: Points) -> Watch:
    """``nan`` for a non-finite metric, ``diverging`` for an objective far off its best; the best kept."""
    for name, number in event.values.items():
        if "nan" not in watch.flags and not name.startswith(SYS_PREFIX) and not math.isfinite(number):
            watch = _raise(watch, "nan", f"metric {name[:80]!r} was {number} at step {event.step}")
    value = event.values.get(watch.objective)
    if value is None or not math.isfinite(value):
        return watch
    if watch.best is not None and "diverging" not in watch.flags and diverged(watch.best, value, watch.mode):
        watch = _raise(watch, "diverging", f"{watch.objective[:80]} was {value:.4g} at step {event.step}, well "
                                           f"{'above' if watch.mode == 'min' else 'below'} its best {watch.best:.4g}")
    better = watch.best is None or (value < watch.best if watch.mode == "min" else value > watch.best)
    return replace(watch, best=value) if better else watch


def _raise(watch: Watch, flag: str, why: str) -> Watch:
    return replace(watch, flags={**watch.flags, flag: why})
