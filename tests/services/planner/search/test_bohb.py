"""BOHB's rule for asha with sampler tpe, fed plain histories: the model is fitted
on the largest budget with enough observations, a third of configs are random,
a finite grid never repeats a config, and the same history gives the same config."""

from __future__ import annotations

import math
from typing import Any

from spotsweep.services.planner.search import Search, TrialRecord
from spotsweep.services.planner.search.bohb import Bohb
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

CONTINUOUS = {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "y": {"type": "uniform", "low": 0.0, "high": 1.0}}
GRID = {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]}


def spec(space: dict[str, Any], trials: int = 100) -> Any:
    return parse_spec({"name": "b", "command": ["t", "{steps}"], "metric": {"name": "loss"}, "space": space,
                       "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3,
                                    "trials": trials, "sampler": "tpe", "seed": 4}})


def at(index: int, x: float, y: float, rungs: dict[int, float], state: TrialState = TrialState.PAUSED) -> TrialRecord:
    return TrialRecord(index, {"x": x, "y": y, "steps": max(rungs, default=1)}, state, rungs=rungs)


def test_asha_with_sampler_tpe_gets_bohbs_sampler_and_strategy_tpe_keeps_optunas() -> None:
    assert isinstance(Search(spec(CONTINUOUS)).model, Bohb)
    tpe = parse_spec({"name": "t", "command": ["t"], "metric": {"name": "loss"}, "space": CONTINUOUS,
                      "strategy": {"type": "tpe", "trials": 10}})
    assert not isinstance(Search(tpe).model, Bohb)


def test_the_model_budget_is_the_largest_with_d_plus_3_observations() -> None:
    bohb = Bohb(spec(CONTINUOUS))  # d = 2: 5 observations make a model
    low = [at(i, i / 10, 0.5, {1: float(i)}) for i in range(5)]
    assert bohb.model_budget(low[:4]) is None
    assert bohb.model_budget(low) == 1
    up = [at(i, i / 10, 0.5, {1: float(i), 3: float(i)}) for i in range(5)] + [at(9, 0.9, 0.5, {1: 9.0, 3: 9.0})]
    assert bohb.model_budget(up) == 3
    nan = [at(i, i / 10, 0.5, {1: float(i), 3: math.nan if i else 1.0}) for i in range(6)]
    assert bohb.model_budget(nan) == 1  # a non-finite value is no observation


def test_random_until_a_model_then_about_a_third_random_and_the_model_goes_where_values_are_low() -> None:
    bohb = Bohb(spec(CONTINUOUS))
    assert bohb.suggest([at(0, 0.5, 0.5, {1: 1.0})], 1).attrs == {"bohb": "random"}
    # low values near x = 0.1 at budget 3, high ones elsewhere
    history = [at(i, 0.1 + 0.01 * (i % 3), 0.05 * i, {1: 0.0, 3: 0.1}) for i in range(6)]
    history += [at(6 + i, 0.6 + 0.05 * i, 0.05 * i, {1: 1.0, 3: 1.0}) for i in range(6)]
    made = [bohb.suggest(history, i) for i in range(12, 72)]
    kinds = [s.attrs["bohb"] for s in made]
    assert set(kinds) == {"random", "tpe@3"} and 10 <= kinds.count("random") <= 30
    modelled = [s.params["x"] for s in made if s.attrs["bohb"] == "tpe@3"]
    assert sum(x < 0.35 for x in modelled) > 0.6 * len(modelled)


def test_on_a_finite_grid_no_config_repeats_and_the_same_history_gives_the_same_config() -> None:
    search = Search(spec(GRID, trials=27))
    history: list[TrialRecord] = []
    for i in range(27):
        params = search.propose(i, history).params
        assert search.propose(i, history).params == params
        value = params["a"] + 0.1 * params["b"]  # a smooth grid: the model has something to learn
        history.append(TrialRecord(i, params, TrialState.PAUSED, rungs={1: value}))
    assert len({(r.params["a"], r.params["b"], r.params["c"]) for r in history}) == 27
