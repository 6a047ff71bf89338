"""Issue 21's goal for ASHA on a grid, checked on the benchmark's simulated pool
(``bench/search.py``: the planner's own decision objects, promotions charged only
the steps they add, as a resume from the checkpoint is): over the 27-config grid
with budgets 3/9/27 and eta 3, the default ASHA (shuffled order, the paper's
promotion rule within each rung's quota) trains 189 of the grid's 729 steps
(25.9%) in every seed, and on the held-out power-law objective it picks the
config best at 27 (judged without noise) in 8 seeds of 10, with a mean regret
under 0.01 (docs/benchmarks.md has the table)."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[4] / "bench"
BUDGET = {"param": "steps", "min": 3, "max": 27}
SEEDS = range(10)
BOUND = 27 * 3 + 9 * 6 + 3 * 18  # 189 of 729 steps


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        import search  # bench/search.py

        assert Path(search.__file__) == BENCH / "search.py"  # not another module of that name
        return search


def runs(bench: ModuleType, objective: str, **extra: str) -> list[Any]:
    return [bench.grid27_run(getattr(bench, objective), {"type": "asha", "budget": BUDGET, "eta": 3, "seed": s, **extra},
                             s, 4) for s in SEEDS]


def test_the_default_asha_picks_the_best_power_law_config_within_its_bound(bench: ModuleType) -> None:
    out = runs(bench, "power_law")
    assert max(r.steps for r in out) <= BOUND
    assert sum(r.picked for r in out) >= 8 and fmean(r.regret for r in out) < 0.01


def test_the_default_asha_stays_within_its_bound_on_the_curve_model_and_beats_the_listed_order(bench: ModuleType) -> None:
    default = [r.steps for r in runs(bench, "curve_model")]
    listed = [r.steps for r in runs(bench, "curve_model", order="listed", promotion="async")]
    assert max(default) <= BOUND
    assert fmean(default) < 0.85 * fmean(listed)  # 189 against 277.8 steps when measured
