"""Population-based training (PBT) as a pure decision: ``decide(config, population, event, rng)``.

Jaderberg et al., "Population Based Training of Neural Networks" (2017),
asynchronous as in Ray Tune's ``PopulationBasedTraining``: a trial decides
when *it* ends a segment, against the latest value each other member
recorded at that interval or below; nothing waits for a generation to fill.
docs/search.md ("Population-based training") tells the rules: exploit,
explore, continue, complete.

No I/O, no clock: the RNG comes in (:class:`Pbt` seeds one per trial and
interval from the spec's ``seed``), so a decision is reproducible. The
planner persists each interval's value as the trial's rung, copies the
donor's checkpoint (:mod:`spotsweep.services.planner.exploit`) and records
each segment's lineage.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spotsweep.services.planner.search.history import TrialRecord, sign
from spotsweep.services.planner.search.rungs import Action, Promotion, StepDecision
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.spec_params import Choice, IntRange, LogUniform, Param, Uniform, sample
from spotsweep.shared.spec_search.pbt import Mutation, PbtStop


@dataclass(frozen=True)
class PbtConfig:
    """The strategy's settings, as plain values."""

    every: int
    max: int
    quantile: float
    mutations: Mapping[str, Mutation]
    resample_probability: float
    space: Mapping[str, Param] = field(default_factory=dict)
    mode: str = "min"


@dataclass(frozen=True)
class Member:
    """One member of the population: its params and its value at each interval it ended."""

    index: int
    params: Mapping[str, Any]
    values: Mapping[int, float]  # budget reached -> objective there

    def latest(self, step: int) -> float | None:
        """Its value at the highest interval at or below ``step``; None: none yet."""
        reached = [s for s in self.values if s <= step]
        return self.values[max(reached)] if reached else None


@dataclass(frozen=True)
class SegmentEnd:
    """Trial ``index`` ended its segment at budget ``step`` with ``value``."""

    index: int
    step: int
    value: float


@dataclass(frozen=True)
class PbtDecision:
    action: Literal["complete", "continue", "exploit"]
    budget: int | None = None  # the next segment's budget (continue, exploit)
    donor: int | None = None  # exploit: whose checkpoint and params
    params: dict[str, Any] = field(default_factory=dict)  # exploit: the explored params (space keys)
    start: int | None = None  # exploit: the donor's latest interval, where the next segment starts
    reason: str = ""


def decide(config: PbtConfig, population: Sequence[Member], event: SegmentEnd, rng: random.Random) -> PbtDecision:
    """What trial ``event.index`` does now that it ended a segment (see the module)."""
    if event.step >= config.max:
        return PbtDecision("complete", reason=f"reached the budget's max {config.max}")
    following = min(event.step + config.every, config.max)
    sg = sign(config.mode)

    def score(value: float) -> float:
        return sg * value if math.isfinite(value) else math.inf  # lower is better; a diverged member last

    ranked = [(score(event.value), event.index)]
    by_index = {m.index: m for m in population}
    for m in population:
        latest = m.latest(event.step) if m.index != event.index else None
        if latest is not None:
            ranked.append((score(latest), m.index))
    ranked.sort()
    n = len(ranked)
    k = int(math.floor(n * config.quantile + 1e-9))
    if k == 0:
        return PbtDecision("continue", following, reason=f"{n} member(s) ranked at step {event.step}: too few for "
                           f"quantile {config.quantile:g}")
    top = [i for s, i in ranked[:k] if math.isfinite(s)]
    bottom = {i for _, i in ranked[n - k:]}
    place = [i for _, i in ranked].index(event.index) + 1
    if event.index not in bottom or event.index in top:
        return PbtDecision("continue", following, reason=f"ranked {place} of {n} at step {event.step}: not in the "
                           f"bottom {k}")
    # A donor behind the trial is not taken: the trial would train again steps it trained (charged against
    # max_steps). One that reached max has nothing left to train from its checkpoint: not copied either.
    reached = {i: max(by_index[i].values, default=0) for i in top}
    donors = [i for i in top if event.step <= reached[i] < config.max]
    if not donors:
        return PbtDecision("continue", following, reason=f"ranked {place} of {n} at step {event.step}, but the top "
                           f"{k} are behind it or reached max {config.max}: nothing to exploit")
    donor = rng.choice(donors)
    params = explore(config, dict(by_index[donor].params), rng)
    # It resumes from the donor's latest checkpoint, at the donor's latest interval (``start``, at or past the
    # trial's), and trains one segment from there: ``budget - start`` steps, what max_steps is charged.
    start = reached[donor]
    budget = min(start + config.every, config.max)
    return PbtDecision("exploit", budget, donor, params, start,
                       reason=f"{event.value:.6g} ranked {place} of {n} at step {event.step} (bottom {k}): exploits "
                              f"trial {donor} (top {k})")


def explore(config: PbtConfig, params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``params`` with each mutated param perturbed or resampled (space keys only)."""
    out = {key: params[key] for key in config.space if key in params}
    for key in sorted(config.mutations):
        param = config.space.get(key)
        mutation = config.mutations[key]
        if param is not None and rng.random() < config.resample_probability:
            out[key] = sample(rng, param)  # the space's own draws
        elif mutation.factor is not None:
            out[key] = _scaled(param, out.get(key), rng.choice(mutation.factor))
        elif mutation.values is not None:
            out[key] = _neighbour(mutation.values, out.get(key), rng)
    return out


def _scaled(param: Param | None, value: Any, factor: float) -> Any:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    scaled = value * factor
    if isinstance(param, IntRange):
        steps = round((scaled - param.low) / param.step)
        top = (param.high - param.low) // param.step
        return param.low + param.step * min(max(steps, 0), top)
    if isinstance(param, (Uniform, LogUniform)):
        return min(max(scaled, param.low), param.high)
    if isinstance(param, Choice):
        numbers = [v for v in param.values if isinstance(v, (int, float))]
        scaled = min(max(scaled, min(numbers)), max(numbers)) if numbers else scaled
    return round(scaled) if isinstance(value, int) else scaled


def _neighbour(values: Sequence[Any], value: Any, rng: random.Random) -> Any:
    """The next or previous entry of ``values`` (staying at an end); a value not
    listed goes to the nearest number listed, or to a random entry."""
    for i, v in enumerate(values):
        if type(v) is type(value) and v == value:
            return values[min(max(i + rng.choice((-1, 1)), 0), len(values) - 1)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return min(numbers, key=lambda v: abs(v - value))
    return rng.choice(list(values))


class Pbt:
    """The planner's stopper for ``strategy: pbt`` (registered as ``pbt``):
    :func:`decide` over the history, as a :class:`StepDecision`."""

    waits = False  # nothing waits: every segment end continues, exploits or completes
    segments = True  # the planner records each segment's lineage (Search.segmented)

    def __init__(self, stop: PbtStop, spec: SweepSpec) -> None:
        s = stop
        self.seed = s.seed
        self.config = PbtConfig(s.interval.every, s.interval.max, s.quantile, dict(s.mutations),
                                s.resample_probability, dict(spec.space), spec.metric.mode)

    def initial_budget(self, index: int) -> int:
        return self.config.every

    def promotions(self, history: Sequence[TrialRecord], slots: int, final: bool = False) -> list[Promotion]:
        return []

    def rng(self, index: int, step: int) -> random.Random:
        """The RNG of trial ``index``'s decision at ``step``: the same on every planner."""
        return random.Random(f"spotsweep:pbt:{self.seed}:{index}:{step}")

    def decide(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision:
        population = [Member(r.index, r.params, r.rungs) for r in history]
        d = decide(self.config, population, SegmentEnd(trial.index, step, value), self.rng(trial.index, step))
        if d.action == "complete":
            return StepDecision(Action.COMPLETE, step, reason=d.reason)
        return StepDecision(Action.PROMOTE, step, d.budget, relaunch=True, reason=d.reason,
                            params=d.params or None, donor=d.donor, start=d.start)
