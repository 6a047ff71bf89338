"""The strategy models' hooks, which stand in for the type switches the rest of the code had."""

from __future__ import annotations

from typing import Any

import pytest

from spotsweep.shared.errors import SpecError
from spotsweep.shared.space import configs, sampler_of
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.spec_search import HyperbandStop, budget_of, stop_of

BASE: dict[str, Any] = {"name": "s", "command": ["t", "{lr}", "{d}"], "metric": {"name": "loss"},
                        "space": {"lr": [0.1, 0.01, 0.001], "d": {"type": "int", "low": 1, "high": 4}}}  # 12 points
ASHA = {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}}


@pytest.mark.parametrize(("strategy", "sampler", "count"), [
    ({"type": "grid"}, "grid", 12),
    ({"type": "grid", "max_trials": 5}, "grid", 5),
    ({"type": "random", "trials": 7}, "random", 7),
    ({"type": "random", "trials": 7, "sampler": "sobol"}, "sobol", 7),
    ({"type": "subset", "trials": 6}, "subset", 6),
    ({"type": "tpe", "trials": 9}, "tpe", 9),
    (ASHA, "grid", 12),
    ({**ASHA, "trials": 20}, "grid", 12),
    ({**ASHA, "trials": 4, "sampler": "tpe"}, "tpe", 4),
])
def test_a_strategy_says_how_its_configurations_are_drawn_and_how_many(strategy: dict[str, Any], sampler: str,
                                                                         count: int) -> None:
    spec = parse_spec({**BASE, "strategy": strategy})
    assert (sampler_of(spec), configs(spec)) == (sampler, count)


def test_asha_implies_hyperbands_stopping_with_its_own_brackets() -> None:
    spec = parse_spec({**BASE, "strategy": {**ASHA, "brackets": 2}})
    assert stop_of(spec) == HyperbandStop(budget=spec.strategy.budget, eta=3, brackets=2)  # type: ignore[attr-defined]
    assert budget_of(spec) is not None and budget_of(spec).param == "steps"  # type: ignore[union-attr]
    median = parse_spec({**BASE, "strategy": {"type": "random", "trials": 3}, "early_stop": {"type": "median"}})
    assert stop_of(median) == median.early_stop and budget_of(median) is None
    assert stop_of(parse_spec(BASE)) is None


@pytest.mark.parametrize(("strategy", "more", "grown"), [
    ({"type": "grid", "max_trials": 5}, 4, {"type": "grid", "max_trials": 9}),
    ({"type": "grid", "max_trials": 5}, 40, {"type": "grid", "max_trials": 12}),
    ({"type": "random", "trials": 7}, 3, {"type": "random", "trials": 10, "seed": 0, "sampler": "random"}),
    ({"type": "subset", "trials": 4, "extends": [2]}, 2, {"type": "subset", "trials": 6, "seed": 0, "extends": [2, 4]}),
    ({**ASHA, "trials": 4, "sampler": "random"}, 1, {**ASHA, "trials": 5, "sampler": "random"}),
])
def test_a_strategy_grows_for_spotsweep_extend(strategy: dict[str, Any], more: int, grown: dict[str, Any]) -> None:
    spec = parse_spec({**BASE, "strategy": strategy})
    data = spec.strategy.grown(spec, more)
    assert {k: v for k, v in data.items() if k in grown} == grown
    assert parse_spec({**BASE, "strategy": data}).strategy.type == strategy["type"]


@pytest.mark.parametrize(("strategy", "message"), [
    ({"type": "grid"}, "the grid's 12 configurations are all in the sweep already"),
    (ASHA, "strategy asha runs every configuration of its grid already"),
])
def test_a_strategy_that_runs_its_whole_grid_cannot_grow(strategy: dict[str, Any], message: str) -> None:
    spec = parse_spec({**BASE, "strategy": strategy})
    with pytest.raises(SpecError) as err:
        spec.strategy.grown(spec, 1)
    assert err.value.errors == [("trials", message)]
