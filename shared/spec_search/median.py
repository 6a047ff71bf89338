"""``early_stop: median``: Optuna's MedianPruner (the planner's ``search/median.py`` decides)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spotsweep.shared.spec_search.registry import StopModel


class MedianStop(StopModel):
    """Optuna's MedianPruner: stop a trial whose best value so far is worse than
    the median of the completed trials at the same step."""

    type: Literal["median"] = "median"
    startup_trials: int = Field(default=5, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)
    min_trials: int = Field(default=1, ge=1)
