"""Issue 21 item 2 and the shuffle of item 1: draws over finite spaces never
repeat a config, a grid under successive halving is taken in a seeded
shuffled order, both lazy (a 10^12-point grid is never listed) and pure
functions of (seed, index), so a restarted planner proposes the same."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from spotsweep.commands import submit as commands
from spotsweep.shared.permutation import IndexPermutation
from spotsweep.shared.space import params_at, total_trials
from spotsweep.shared.spec_params import grid_size
from spotsweep.shared.spec import SweepSpec, parse_spec

SPACE: dict[str, Any] = {"lr": [1e-4, 3e-4, 1e-3], "batch": [32, 64, 128], "layers": {"type": "int", "low": 4, "high": 8}}
HUGE: dict[str, Any] = {f"p{k}": list(range(10)) for k in range(12)}  # 10^12 points
BUDGET = {"param": "steps", "min": 1, "max": 9}


def make(space: dict[str, Any], strategy: dict[str, Any], **extra: Any) -> SweepSpec:
    return parse_spec({"name": "s", "command": ["t", "{steps}"] if "budget" in strategy or "early_stop" in extra else ["t"],
                       "metric": {"name": "loss"}, "space": space, "strategy": strategy, **extra})


def configs(spec: SweepSpec) -> list[tuple[Any, ...]]:
    return [tuple(params_at(spec, i).values()) for i in range(total_trials(spec))]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 27, 64, 65, 100, 729, 1000])
def test_the_index_permutation_is_a_bijection_stable_by_seed(size: int) -> None:
    perm = IndexPermutation(size, 3)
    out = [perm(i) for i in range(size)]
    assert sorted(out) == list(range(size))
    assert out == [IndexPermutation(size, 3)(i) for i in range(size)]  # a new process, the same order
    if size >= 27:
        assert out != list(range(size)) and out != [IndexPermutation(size, 4)(i) for i in range(size)]


def test_random_search_over_lists_never_repeats_and_runs_each_config_once_at_the_space_size() -> None:
    spec = make(SPACE, {"type": "random", "trials": 45, "seed": 1})
    assert len(set(configs(spec))) == 45 == grid_size(spec.space)
    more = make(SPACE, {"type": "random", "trials": 60, "seed": 1})
    assert total_trials(more) == 45 and sorted(configs(more)) == sorted(configs(spec))
    assert commands.warnings(more) == ["strategy.trials: 60 but the space has only 45 configurations: each runs once, "
                                       "without repeats (45 trial(s))"]
    assert commands.warnings(make(SPACE, {"type": "random", "trials": 20})) == []
    # Stable by seed, another seed another order; extending keeps the first draws.
    assert configs(make(SPACE, {"type": "random", "trials": 20, "seed": 1})) == configs(spec)[:20]
    assert configs(make(SPACE, {"type": "random", "trials": 20, "seed": 2})) != configs(spec)[:20]


def test_a_continuous_dimension_keeps_independent_draws() -> None:
    spec = make({**SPACE, "wd": {"type": "loguniform", "low": 1e-5, "high": 1e-2}}, {"type": "random", "trials": 100})
    assert total_trials(spec) == 100 and len(set(configs(spec))) == 100


def test_a_huge_grid_is_drawn_lazily_without_repeats() -> None:
    spec = make(HUGE, {"type": "random", "trials": 10**12, "seed": 7})
    assert total_trials(spec) == 10**12
    started = time.process_time()
    drawn = [tuple(params_at(spec, i).values()) for i in (*range(2000), 10**12 - 1, 123_456_789_012)]
    assert time.process_time() - started < 5  # nothing the size of the grid is built (a generous bound, not a timing test)
    assert len(set(drawn)) == len(drawn)
    assert drawn[5] == tuple(params_at(make(HUGE, {"type": "random", "trials": 10**12, "seed": 7}), 5).values())
    asha = make(HUGE, {"type": "asha", "budget": BUDGET, "seed": 7})
    assert total_trials(asha) == 10**12 and params_at(asha, 10**12 - 1) != params_at(asha, 0)


def test_asha_and_hyperband_take_a_grid_in_a_seeded_shuffled_order_and_listed_on_request() -> None:
    listed = configs(make(SPACE, {"type": "grid"}))
    asha = configs(make(SPACE, {"type": "asha", "budget": BUDGET, "seed": 3}))
    assert asha != listed and sorted(asha) == sorted(listed)  # each config once
    assert asha == configs(make(SPACE, {"type": "asha", "budget": BUDGET, "seed": 3}))
    assert asha != configs(make(SPACE, {"type": "asha", "budget": BUDGET, "seed": 4}))
    assert configs(make(SPACE, {"type": "asha", "budget": BUDGET, "order": "listed"})) == listed
    hyperband = make(SPACE, {"type": "grid"}, early_stop={"type": "hyperband", "budget": BUDGET})
    assert configs(hyperband) != listed and sorted(configs(hyperband)) == sorted(listed)
    assert configs(make(SPACE, {"type": "grid", "order": "listed"},
                        early_stop={"type": "hyperband", "budget": BUDGET})) == listed


def test_asha_and_hyperband_config_streams_from_random_never_repeat() -> None:
    asha = make(SPACE, {"type": "asha", "budget": BUDGET, "sampler": "random", "trials": 100})
    assert total_trials(asha) == 45 and len(set(configs(asha))) == 45
    assert commands.warnings(asha)[0].startswith("strategy.trials: 100 but the space has only 45")
    hyperband = make(SPACE, {"type": "random", "trials": 45}, early_stop={"type": "hyperband", "budget": BUDGET})
    assert len(set(configs(hyperband))) == 45


def test_validate_prints_the_warning(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "command": ["true"], "metric": {"name": "loss"}, "space": SPACE,
                                    "strategy": {"type": "random", "trials": 50}}))
    proc = subprocess.run([sys.executable, "-m", "spotsweep", "validate", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "each runs once, without repeats (45 trial(s))" in proc.stdout + proc.stderr
    assert "45 trial(s)" in proc.stdout


@pytest.mark.parametrize("strategy", [{"type": "random", "sampler": "sobol", "trials": 60},
                                      {"type": "asha", "sampler": "sobol", "trials": 60, "budget": BUDGET}])
def test_sobol_past_the_space_size_runs_each_config_once_and_says_so(strategy: dict[str, Any]) -> None:
    # It used to plan 60 trials over the 45 configs and fail at the 46th ("configuration 45 of a 45-point grid").
    spec = make(SPACE, strategy)
    assert total_trials(spec) == 45
    assert sorted(configs(spec)) == sorted(tuple(p.values()) for p in (params_at(make(SPACE, {"type": "grid"}), i)
                                                                     for i in range(45)))
    assert commands.warnings(spec) == ["strategy.trials: 60 but the space has only 45 configurations: each runs once, "
                                       "without repeats (45 trial(s))"]
