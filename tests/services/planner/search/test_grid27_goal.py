"""Issue 21's goal for ASHA on a grid, checked on the benchmark's simulated pool
(``bench/search.py``: the planner's own decision objects, promotions charged only
the steps they add, as a resume from the checkpoint is): over the 27-config grid
with budgets 3/9/27 and eta 3, the default ASHA (shuffled order, the paper's
promotion rule) trains at most 35% of the grid's 729 steps in every seed, and on
the held-out power-law objective it finds the best config every time. On the
curve model, where early rankings mislead by construction, it finds it only
3 times in 10 (docs/benchmarks.md says so); only the steps are checked there."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[4] / "bench"
BUDGET = {"param": "steps", "min": 3, "max": 27}
SEEDS = range(10)
GOAL = 0.35 * 729


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        import search  # bench/search.py

        assert Path(search.__file__) == BENCH / "search.py"  # not another module of that name
        return search


def runs(bench: ModuleType, objective: str, **extra: str) -> list[tuple[float, bool]]:
    return [bench.grid27_run(getattr(bench, objective), {"type": "asha", "budget": BUDGET, "eta": 3, "seed": s, **extra},
                             s, 4) for s in SEEDS]


def test_the_default_asha_finds_the_best_power_law_config_within_35_percent_of_the_grid(bench: ModuleType) -> None:
    out = runs(bench, "power_law")
    assert max(steps for steps, _ in out) <= GOAL
    assert all(found for _, found in out)


def test_the_default_asha_stays_within_35_percent_on_the_curve_model_and_beats_the_listed_order(bench: ModuleType) -> None:
    default = [steps for steps, _ in runs(bench, "curve_model")]
    listed = [steps for steps, _ in runs(bench, "curve_model", order="listed", promotion="async")]
    assert max(default) <= GOAL
    assert fmean(default) < 0.85 * fmean(listed)  # 216.6 against 277.8 steps when measured
