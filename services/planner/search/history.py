"""What the search decisions know about past trials: plain values the planner
reads from its database, so that every decision can be rebuilt after a restart.

A :class:`TrialRecord` is one trial as stored; the values recorded at its rungs
are persisted when decided, so a restart sees exactly what the decisions saw,
and the sampler's per-trial attributes (Optuna's ``system_attrs``, JSON) hold
CMA-ES's and NSGA-II's generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotsweep.shared.nonfinite import number
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState


@dataclass(frozen=True)
class TrialRecord:
    index: int
    params: Mapping[str, Any]
    state: TrialState
    values: tuple[float, ...] | None = None  # final objective values, in the spec's objectives order
    curve: Mapping[int, float] = field(default_factory=dict)  # first objective at each reported step
    rungs: Mapping[int, float] = field(default_factory=dict)  # value recorded at each rung budget decided
    attrs: Mapping[str, Any] = field(default_factory=dict)  # the sampler's system_attrs for this trial
    failures: int = 0
    error: str | None = None
    last_step: int = 0  # the highest step any of its runs reported (a completed trial: where its run ended)


def objective_names(spec: SweepSpec) -> list[str]:
    """The metric names the search optimises, first one first."""
    return [m.name for m in spec.objectives] if spec.objectives else [spec.metric.name]


def objective_values(spec: SweepSpec, metrics: Mapping[str, Any] | None) -> tuple[float, ...] | None:
    """A trial's final metrics (the ``metrics`` column) as objective values;
    None when one is missing or not a number (the trial counts as failed).
    NaN and infinities, stored as the trial contract's strings, are read back
    as floats: a diverged trial reported its objective, and the decisions
    see what it was."""
    out = []
    for name in objective_names(spec):
        value = number((metrics or {}).get(name))
        if value is None:
            return None
        out.append(value)
    return tuple(out)


def sign(mode: str) -> float:
    """+1 for min, -1 for max: ``sign * value`` is lower-is-better."""
    return 1.0 if mode == "min" else -1.0
