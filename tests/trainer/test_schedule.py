"""The learning rate is a pure function of the step: warmup, cosine to the floor at the horizon, flat after."""

from __future__ import annotations

import pytest

from spotsweep.trainer.schedule import default_warmup, lr_at


def test_warmup_then_cosine_to_the_floor_at_the_horizon() -> None:
    lrs = [lr_at(s, 1.0, warmup=10, horizon=100, min_ratio=0.1) for s in range(1, 121)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))  # never rises after warmup
    assert lrs[54] == pytest.approx(0.55)  # half-way through the cosine: the middle of peak and floor
    assert lrs[99] == pytest.approx(0.1) and lrs[119] == pytest.approx(0.1)  # flat past the horizon


def test_a_shorter_run_is_a_prefix_of_the_longer_one_with_the_same_horizon() -> None:
    long = [lr_at(s, 3e-4, 20, 1000) for s in range(1, 1001)]
    short = [lr_at(s, 3e-4, 20, 1000) for s in range(1, 101)]
    assert short == long[:100]


def test_steps_count_from_one() -> None:
    with pytest.raises(ValueError, match="steps count from 1"):
        lr_at(0, 1.0, 1, 10)
    assert default_warmup(1000) == 100 and default_warmup(5) == 1
