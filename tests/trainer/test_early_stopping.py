"""Early-stopping decisions as pure functions: plain events in, a state and a reason out."""

from __future__ import annotations

import pytest

from spotsweep.trainer.config import EarlyStopConfig, Threshold
from spotsweep.trainer.early_stopping import StopState, observe, out_of_time


def _feed(rules: EarlyStopConfig, values: list[float], metric: str = "val_loss") -> tuple[StopState, int | None, str | None]:
    state = StopState()
    for i, v in enumerate(values, start=1):
        state, reason = observe(rules, state, step=10 * i, metrics={metric: v})
        if reason:
            return state, 10 * i, reason
    return state, None, None


def test_patience_counts_evaluations_without_enough_improvement() -> None:
    rules = EarlyStopConfig(patience=2, min_delta=0.05)
    # 1.0 -> 0.97 (too small) -> 0.9 (counts) -> 0.89 -> 0.88: stopped at the 5th evaluation
    state, step, reason = _feed(rules, [1.0, 0.97, 0.9, 0.89, 0.88])
    assert step == 50 and state.best == 0.9 and "patience 2" in (reason or "")
    _, step, _ = _feed(rules, [1.0, 0.9, 0.8, 0.7, 0.6])
    assert step is None


def test_max_mode_and_patience_off() -> None:
    rules = EarlyStopConfig(metric="val_acc", mode="max", patience=1)
    _, step, _ = _feed(rules, [0.5, 0.6, 0.55], metric="val_acc")
    assert step == 30
    _, step, _ = _feed(EarlyStopConfig(), [1.0, 2.0, 3.0, 4.0])  # patience 0: never
    assert step is None


def test_threshold_applies_from_its_step_on() -> None:
    rules = EarlyStopConfig(thresholds=(Threshold.parse("val_acc<0.3@20"),))
    state = StopState()
    assert observe(rules, state, 10, {"val_acc": 0.1})[1] is None  # too early to judge
    assert observe(rules, state, 20, {"val_acc": 0.35})[1] is None
    reason = observe(rules, state, 30, {"val_acc": 0.25})[1]
    assert reason and "val_acc = 0.25" in reason and "val_acc<0.3@20" in reason


def test_state_round_trips_through_a_checkpoint() -> None:
    state = StopState(best=0.5, bad_evals=2)
    assert StopState.from_dict(state.to_dict()) == state
    assert StopState.from_dict({}) == StopState()


def test_wall_time_budget() -> None:
    rules = EarlyStopConfig(max_seconds=60)
    assert out_of_time(rules, 59.9, 10) is None
    assert "wall-time budget of 60s" in (out_of_time(rules, 60.0, 10) or "")
    assert out_of_time(EarlyStopConfig(), 1e9, 10) is None


@pytest.mark.parametrize("text", ["val_acc<0.3", "val_acc=0.3@2", "<0.3@2", "val_acc<x@2"])
def test_bad_threshold_syntax_is_explained(text: str) -> None:
    with pytest.raises(ValueError, match="METRIC<VALUE@STEP|not a number"):
        Threshold.parse(text)
