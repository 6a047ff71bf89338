"""Early stopping inside a trial, as pure decisions: ``observe(rules, state, step, metrics)``.

No clock and no I/O: the loop passes each evaluation's metrics (and the
elapsed training time) in, gets the new state and a reason to stop or None,
and saves the state in the checkpoint, so a resumed run keeps counting where
it was (Optuna's pruners and Ray Tune's stoppers work the same way). The rules
(:class:`~spotsweep.trainer.config.EarlyStopConfig`): patience, thresholds, a wall-time budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from spotsweep.trainer.config import EarlyStopConfig


@dataclass(frozen=True)
class StopState:
    best: float | None = None
    bad_evals: int = 0  # evaluations since the best one

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, float | int | None]) -> StopState:
        best = raw.get("best")
        return cls(best=None if best is None else float(best), bad_evals=int(raw.get("bad_evals") or 0))


def _improved(rules: EarlyStopConfig, best: float | None, value: float) -> bool:
    if best is None:
        return True
    return value < best - rules.min_delta if rules.mode == "min" else value > best + rules.min_delta


def observe(rules: EarlyStopConfig, state: StopState, step: int, metrics: Mapping[str, float]) -> tuple[StopState, str | None]:
    """The state after an evaluation at ``step``, and why to stop now (None: go on)."""
    for rule in rules.thresholds:
        value = metrics.get(rule.metric)
        if value is None or step < rule.step:
            continue
        if (value < rule.value) if rule.op == "<" else (value > rule.value):
            return state, f"early stop at step {step}: {rule.metric} = {value:.6g} (rule {rule})"
    value = metrics.get(rules.metric)
    if rules.patience == 0 or value is None or not math.isfinite(value):
        return state, None
    if _improved(rules, state.best, value):
        return StopState(best=value, bad_evals=0), None
    state = replace(state, bad_evals=state.bad_evals + 1)
    if state.bad_evals >= rules.patience:
        return state, (
            f"early stop at step {step}: {rules.metric} has not improved on {state.best:.6g} by more than "
            f"{rules.min_delta:g} for {state.bad_evals} evaluations (patience {rules.patience})"
        )
    return state, None


def out_of_time(rules: EarlyStopConfig, elapsed_s: float, step: int) -> str | None:
    """Why to stop for the wall-time budget, or None."""
    if rules.max_seconds is None or elapsed_s < rules.max_seconds:
        return None
    return f"stopped at step {step}: wall-time budget of {rules.max_seconds:g}s used ({elapsed_s:.1f}s of training)"
