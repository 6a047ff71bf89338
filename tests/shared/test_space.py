"""Trial index -> params: grid order, sizes, laziness, random determinism, repeats."""

from __future__ import annotations

from collections import Counter

import itertools
import math
from typing import Any

import pytest

from spotsweep.shared.errors import SpecError
from spotsweep.shared.space import params_at, total_trials
from spotsweep.shared.spec_params import grid_size
from spotsweep.shared.spec import SweepSpec, parse_spec

SPACE: dict[str, Any] = {
    "lr": [1.0e-4, 3.0e-4, 1.0e-3],
    "batch_size": [32, 64, 128],
    "layers": {"type": "int", "low": 4, "high": 8},
}


def make(space: dict[str, Any], strategy: dict[str, Any] | None = None, **extra: Any) -> SweepSpec:
    return parse_spec(
        {"name": "s", "command": ["t"], "metric": {"name": "loss"}, "space": space, "strategy": strategy or {"type": "grid"}, **extra}
    )


def test_grid_size_and_order_follow_itertools_product() -> None:
    spec = make(SPACE)
    assert grid_size(spec.space) == 3 * 3 * 5 == 45
    assert total_trials(spec) == 45
    expected = [dict(zip(SPACE, combo)) for combo in itertools.product(SPACE["lr"], SPACE["batch_size"], range(4, 9))]
    got = [params_at(spec, i) for i in range(45)]
    assert got == expected
    assert got[0] == {"lr": 1e-4, "batch_size": 32, "layers": 4}
    assert got[1] == {"lr": 1e-4, "batch_size": 32, "layers": 5}  # last key fastest
    assert list(got[7]) == ["lr", "batch_size", "layers"]


def test_int_range_step_is_inclusive_of_reachable_high() -> None:
    spec = make({"n": {"type": "int", "low": 1, "high": 10, "step": 3}})
    assert grid_size(spec.space) == 4
    assert [params_at(spec, i)["n"] for i in range(4)] == [1, 4, 7, 10]
    spec = make({"n": {"type": "int", "low": 1, "high": 9, "step": 3}})
    assert [params_at(spec, i)["n"] for i in range(total_trials(spec))] == [1, 4, 7]


def test_values_keep_their_types() -> None:
    spec = make({"a": [1, 2.0, True, "x"], "n": {"type": "int", "low": 0, "high": 2}})
    got = [params_at(spec, i) for i in range(total_trials(spec))]
    assert [type(p["a"]) for p in got[::3]] == [int, float, bool, str]
    assert all(type(p["n"]) is int for p in got)


def test_grid_size_refuses_continuous_params() -> None:
    spec = make({"d": {"type": "uniform", "low": 0, "high": 1}}, {"type": "random", "trials": 3})
    with pytest.raises(SpecError) as info:
        grid_size(spec.space)
    assert str(info.value) == "space.d: uniform range cannot be enumerated by strategy grid; use strategy random or list the values"


def test_empty_space_is_one_configuration() -> None:
    spec = make({}, repeats=3)
    assert total_trials(spec) == 3
    assert [params_at(spec, i) for i in range(3)] == [{"seed": 0}, {"seed": 1}, {"seed": 2}]


def test_max_trials_caps_the_grid_in_order() -> None:
    spec = make(SPACE, {"type": "grid", "max_trials": 10})
    assert total_trials(spec) == 10
    assert [params_at(spec, i) for i in range(10)] == [params_at(make(SPACE), i) for i in range(10)]
    assert total_trials(make(SPACE, {"type": "grid", "max_trials": 1000})) == 45
    with pytest.raises(IndexError, match="trial index 10 out of range for a sweep of 10 trials"):
        params_at(spec, 10)
    with pytest.raises(IndexError):
        params_at(spec, -1)


def test_repeats_share_params_and_differ_by_seed() -> None:
    spec = make(SPACE, repeats=3)
    assert total_trials(spec) == 135
    base = make(SPACE)
    for i in (0, 1, 2, 3, 134):
        assert params_at(spec, i) == {**params_at(base, i // 3), "seed": i % 3}
    assert "seed" not in params_at(base, 0)


HUGE = {f"p{k}": list(range(10 * k, 10 * k + 10)) for k in range(10)}  # 10^10 points


@pytest.mark.timeout(60)  # generous on a shared machine; an eager decoder never gets there
def test_huge_grid_is_decoded_lazily() -> None:
    spec = make(HUGE, {"type": "grid", "max_trials": 2 * 10**9})
    index = 10**9 + 7
    params = params_at(spec, index)  # expanding the 10^10 points first would never end
    assert grid_size(spec.space) == 10**10
    digits = f"{index:010d}"  # ten radix-10 digits, first key slowest
    assert params == {f"p{k}": 10 * k + int(digits[k]) for k in range(10)}


@pytest.mark.timeout(60)
def test_huge_random_sweep_is_sampled_lazily() -> None:
    spec = make(HUGE, {"type": "random", "trials": 10**12, "seed": 1})
    params = params_at(spec, 10**9 + 7)  # drawing 10^9 points first would never end
    assert all(params[f"p{k}"] in HUGE[f"p{k}"] for k in range(10))


RANDOM_SPACE: dict[str, Any] = {
    "lr": [1e-4, 3e-4, 1e-3],
    "dropout": {"type": "uniform", "low": 0.1, "high": 0.3},
    "wd": {"type": "loguniform", "low": 1e-5, "high": 1e-2},
    "layers": {"type": "int", "low": 4, "high": 12, "step": 4},
}


def test_random_is_deterministic_and_independent_of_call_order() -> None:
    spec = make(RANDOM_SPACE, {"type": "random", "trials": 200, "seed": 5})
    forward = [params_at(spec, i) for i in range(200)]
    backward = [params_at(spec, i) for i in reversed(range(200))][::-1]
    assert forward == backward
    # A fresh spec object (a restarted planner) gets the same params.
    assert params_at(make(RANDOM_SPACE, {"type": "random", "trials": 200, "seed": 5}), 123) == forward[123]
    assert len({tuple(p.values()) for p in forward}) > 150  # configurations differ
    assert params_at(make(RANDOM_SPACE, {"type": "random", "trials": 200, "seed": 6}), 0) != forward[0]


def test_random_respects_ranges_and_kinds() -> None:
    spec = make(RANDOM_SPACE, {"type": "random", "trials": 2000})
    samples = [params_at(spec, i) for i in range(2000)]
    assert {p["lr"] for p in samples} == {1e-4, 3e-4, 1e-3}
    assert {p["layers"] for p in samples} == {4, 8, 12}
    assert all(type(p["layers"]) is int for p in samples)
    assert all(0.1 <= p["dropout"] <= 0.3 for p in samples)
    assert all(1e-5 <= p["wd"] <= 1e-2 for p in samples)
    # Log-uniform: about a third of the samples in each decade.
    low_decade = sum(p["wd"] < 1e-4 for p in samples) / len(samples)
    assert 0.28 < low_decade < 0.39
    # Uniform: about half below the midpoint.
    assert 0.45 < sum(p["dropout"] < 0.2 for p in samples) / len(samples) < 0.55


def test_random_repeats_share_the_sample() -> None:
    spec = make(RANDOM_SPACE, {"type": "random", "trials": 4}, repeats=2)
    assert total_trials(spec) == 8
    a, b = params_at(spec, 6), params_at(spec, 7)
    assert (a["seed"], b["seed"]) == (0, 1)
    assert {k: v for k, v in a.items() if k != "seed"} == {k: v for k, v in b.items() if k != "seed"}
    assert not math.isclose(params_at(spec, 0)["dropout"], a["dropout"])


# --- subset: a balanced, distinct design of a grid too large to run --------------------------

DEEPSEEK = {f"p{k}": [1, 2, 3] for k in range(6)}  # 3**6 = 729 configurations


def _levels(spec: SweepSpec, rows: list[dict[str, Any]]) -> dict[str, dict[Any, int]]:
    return {k: {v: sum(1 for r in rows if type(r[k]) is type(v) and r[k] == v) for v in _values(spec, k)} for k in spec.space}


def _values(spec: SweepSpec, key: str) -> list[Any]:
    param = spec.space[key]
    if param.type == "choice":
        return list(param.values)  # type: ignore[union-attr]
    return list(range(param.low, param.high + 1, param.step))  # type: ignore[union-attr]


@pytest.mark.parametrize("n", [1, 5, 27, 100, 364, 365, 600, 729])
def test_subset_is_distinct_and_balanced(n: int) -> None:
    spec = make(DEEPSEEK, {"type": "subset", "trials": n, "seed": 3})
    assert total_trials(spec) == n
    rows = [params_at(spec, i) for i in range(n)]
    assert len({tuple(r.values()) for r in rows}) == n
    for key, counts in _levels(spec, rows).items():
        assert min(counts.values()) >= n // 3, (key, counts)
        assert max(counts.values()) <= -(-n // 3), (key, counts)


def test_subset_mixes_level_counts_int_ranges_and_types() -> None:
    space = {"lr": [1e-4, 3e-4, 1e-3], "flag": [True, False], "depth": {"type": "int", "low": 2, "high": 12, "step": 2},
             "act": ["relu", "gelu", "silu", "tanh"], "one": [1]}
    spec = make(space, {"type": "subset", "trials": 40, "seed": 0})
    rows = [params_at(spec, i) for i in range(40)]
    assert len({tuple(r.values()) for r in rows}) == 40
    sizes = {"lr": 3, "flag": 2, "depth": 6, "act": 4, "one": 1}
    for key, counts in _levels(spec, rows).items():
        assert min(counts.values()) >= 40 // sizes[key], (key, counts)
    assert all(type(r["flag"]) is bool and type(r["depth"]) is int and r["depth"] % 2 == 0 for r in rows)


def _pair_chi2(rows: list[tuple[int, ...]], sizes: tuple[int, ...]) -> float:
    n, total = len(rows), 0.0
    for j, k in itertools.combinations(range(len(sizes)), 2):
        expected = n / (sizes[j] * sizes[k])
        for a, b in itertools.product(range(sizes[j]), range(sizes[k])):
            total += (sum(1 for r in rows if (r[j], r[k]) == (a, b)) - expected) ** 2 / expected
    return total


def test_subset_pairs_are_more_even_than_shuffled_balanced_columns() -> None:
    import random

    from spotsweep.shared.designs import balanced_subset

    sizes = (3,) * 6
    ours = _pair_chi2(list(balanced_subset(sizes, 27, 0)), sizes)
    baseline = []
    for seed in range(20):
        rng = random.Random(seed)
        columns = [[i % 3 for i in range(27)] for _ in sizes]
        for c in columns:
            rng.shuffle(c)
        baseline.append(_pair_chi2(list(zip(*columns)), sizes))
    assert ours < 0.5 * (sum(baseline) / len(baseline))


def test_subset_is_deterministic_and_seeded() -> None:
    from spotsweep.shared.designs import balanced_subset

    spec = make(DEEPSEEK, {"type": "subset", "trials": 50, "seed": 1})
    first = [params_at(spec, i) for i in range(50)]
    balanced_subset.cache_clear()  # a restarted planner builds the design again
    again = make(DEEPSEEK, {"type": "subset", "trials": 50, "seed": 1})
    assert [params_at(again, i) for i in reversed(range(50))][::-1] == first
    other = make(DEEPSEEK, {"type": "subset", "trials": 50, "seed": 2})
    assert [params_at(other, i) for i in range(50)] != first


def test_subset_of_a_huge_grid_never_enumerates_it() -> None:
    spec = make(HUGE, {"type": "subset", "trials": 200, "seed": 0})  # 10**10 configurations
    rows = [params_at(spec, i) for i in range(200)]
    assert len({tuple(r.values()) for r in rows}) == 200
    for key, counts in _levels(spec, rows).items():
        assert min(counts.values()) == 20 == max(counts.values()), key


def test_an_extended_subset_keeps_its_rows_and_stays_distinct_and_balanced() -> None:
    from spotsweep.services.planner.extend import extended

    first = make(DEEPSEEK, {"type": "subset", "trials": 40, "seed": 0})
    grown = extended(first, trials=40)  # spotsweep extend SWEEP --trials 40
    assert total_trials(grown) == 80
    rows = [params_at(grown, i) for i in range(80)]
    assert rows[:40] == [params_at(first, i) for i in range(40)]  # the trials already run keep their configs
    assert len({tuple(r.values()) for r in rows}) == 80
    for key, counts in _levels(grown, rows).items():
        assert min(counts.values()) >= 80 // 3 and max(counts.values()) <= -(-80 // 3), (key, counts)
    again = extended(grown, trials=1)  # grown again by one: still balanced for 81
    rows = [params_at(again, i) for i in range(81)]
    assert rows[:80] == [params_at(grown, i) for i in range(80)] and len({tuple(r.values()) for r in rows}) == 81
    assert all(set(counts.values()) == {27} for counts in _levels(again, rows).values())


MIXED = {**DEEPSEEK, "a": [1, 2, 3], "b": [1, 2], "c": list(range(5))}


@pytest.mark.parametrize("space, stages", [(MIXED, (10, 20, 30)), (MIXED, (5, 6, 7, 8, 9)), (MIXED, (100, 364, 500, 729)),
                                           (DEEPSEEK, (100, 364, 500, 700, 729))])  # the last: most of the grid
def test_a_subset_grown_in_stages_is_balanced_at_every_stage(space: dict[str, Any], stages: tuple[int, ...]) -> None:
    for n in range(1, len(stages)):
        spec = make(space, {"type": "subset", "trials": stages[n], "seed": 4, "extends": list(stages[:n])})
        rows = [params_at(spec, i) for i in range(stages[n])]
        assert len({tuple(r.values()) for r in rows}) == stages[n]
        for key, counts in _levels(spec, rows).items():
            levels = len(counts)
            assert stages[n] // levels <= min(counts.values()) <= max(counts.values()) <= -(-stages[n] // levels), (key, counts)


def test_subset_larger_than_the_grid_runs_each_config_once_with_a_warning() -> None:
    spec = make(DEEPSEEK, {"type": "subset", "trials": 730})
    assert total_trials(spec) == 729
    assert len({tuple(params_at(spec, i).values()) for i in range(729)}) == 729
    assert spec.strategy.warnings(spec) == ["strategy.trials: 730 but the space has only 729 configurations: each runs "
                                            "once, without repeats (729 trial(s))"]
    with pytest.raises(SpecError) as info:
        make({"d": {"type": "uniform", "low": 0, "high": 1}}, {"type": "subset", "trials": 3})
    assert info.value.errors == [("space.d", "uniform range cannot be enumerated by strategy subset; list the values or use a sampler that samples")]


# --- random with sampler: sobol ----------------------------------------------------------------


def test_sobol_points_are_lazy_deterministic_and_cover_evenly() -> None:
    spec = make(RANDOM_SPACE, {"type": "random", "trials": 256, "seed": 4, "sampler": "sobol"})
    points = [params_at(spec, i) for i in range(256)]
    assert params_at(make(RANDOM_SPACE, {"type": "random", "trials": 256, "seed": 4, "sampler": "sobol"}), 200) == points[200]
    assert all(0.1 <= p["dropout"] < 0.3 and 1e-5 <= p["wd"] <= 1e-2 and p["layers"] in (4, 8, 12) for p in points)
    # 256 = 2**8 Sobol' points: each of 16 equal dropout cells holds exactly 16 (random sampling would not).
    cells = [int((p["dropout"] - 0.1) / 0.2 * 16) for p in points]
    assert sorted(cells.count(c) for c in range(16)) == [16] * 16
    decades = [int(math.log10(p["wd"]) + 5) for p in points]
    assert all(80 <= decades.count(d) <= 91 for d in range(3))  # log-uniform: a third per decade
    assert params_at(make(RANDOM_SPACE, {"type": "random", "trials": 256, "seed": 5, "sampler": "sobol"}), 0) != points[0]


def test_sobol_over_a_finite_space_never_repeats_a_config_and_stays_balanced() -> None:
    """Sobol' points land in the same cell of a list space again: each config is the next *new* cell
    (a repeat is a wasted run), the same after a planner restart, and the first 2^k still balanced."""
    from spotsweep.shared.designs import sobol_cells

    dyadic = {"a": [1, 2, 3, 4], "b": [1, 2, 3, 4], "c": ["x", "y", "z", "w"]}
    spec = make(dyadic, {"type": "random", "trials": 64, "seed": 3, "sampler": "sobol"})
    configs = [tuple(params_at(spec, i).values()) for i in range(64)]
    assert len(set(configs)) == 64  # the whole grid, each once
    assert all(sorted(Counter(c[d] for c in configs[:16]).values()) == [4, 4, 4, 4] for d in range(3))
    sobol_cells.cache_clear()  # a restarted planner: nothing cached, the same configs
    assert [tuple(params_at(spec, i).values()) for i in range(64)] == configs
    odd = {"a": [1, 2, 3], "b": list(range(5)), "c": {"type": "int", "low": 0, "high": 6}}  # 3 x 5 x 7, not dyadic
    spec = make(odd, {"type": "random", "trials": 105, "seed": 9, "sampler": "sobol"})
    assert len({tuple(params_at(spec, i).values()) for i in range(105)}) == 105


def test_model_strategies_are_not_static() -> None:
    from spotsweep.shared.space import NeedsHistory

    spec = make(RANDOM_SPACE, {"type": "tpe", "trials": 20})
    assert total_trials(spec) == 20
    with pytest.raises(NeedsHistory, match="tpe"):
        params_at(spec, 0)


def test_asha_draws_configs_from_the_grid_or_random_without_the_budget() -> None:
    budget = {"param": "steps", "min": 1, "max": 27}
    grid = make(SPACE, {"type": "asha", "budget": budget})
    assert total_trials(grid) == 45
    listed = [params_at(make(SPACE), i) for i in range(45)]
    shuffled = [params_at(grid, i) for i in range(45)]  # the grid's configs, each once, in a seeded order
    assert shuffled != listed and sorted(map(repr, shuffled)) == sorted(map(repr, listed))
    assert [params_at(make(SPACE, {"type": "asha", "budget": budget, "order": "listed"}), i) for i in range(45)] == listed
    assert total_trials(make(SPACE, {"type": "asha", "budget": budget, "trials": 10})) == 10
    sampled = make(RANDOM_SPACE, {"type": "asha", "budget": budget, "trials": 30, "seed": 2})
    assert params_at(sampled, 3) == params_at(make(RANDOM_SPACE, {"type": "random", "trials": 30, "seed": 2}), 3)
