"""The learning rate as a pure function of the step: nothing to checkpoint, nothing to drift.

Linear warmup from ``peak / warmup`` to ``peak`` over ``warmup`` steps, then a
cosine down to ``min_ratio * peak`` at step ``horizon``, flat after that.

The horizon is separate from the run's length on purpose: a successive-halving
sweep (ASHA, Hyperband) trains every trial for a short budget, then resumes
the best ones with more steps. With ``horizon`` fixed at the largest budget,
the first 100 steps of a 100-step run are the first 100 steps of the 1000-step
run it may later become, so resuming continues the very same trajectory.
"""

from __future__ import annotations

import math


def lr_at(step: int, peak: float, warmup: int, horizon: int, min_ratio: float = 0.1) -> float:
    """The learning rate of optimizer step ``step`` (1-based)."""
    if step < 1:
        raise ValueError(f"steps count from 1 (got {step})")
    if warmup > 0 and step <= warmup:
        return peak * step / warmup
    if step >= horizon:
        return peak * min_ratio
    progress = (step - warmup) / max(1, horizon - warmup)
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def default_warmup(horizon: int) -> int:
    """10% of the horizon (at least one step), nanoGPT-style."""
    return max(1, horizon // 10)
