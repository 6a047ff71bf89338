"""``strategy: pbt`` in a spec: what it accepts, and errors that name the field and the value."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from spotsweep.shared.errors import SpecError
from spotsweep.shared.space import params_at, total_trials
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.spec_search import budget_of, summary

SPEC: dict[str, Any] = {
    "name": "p", "command": ["python", "t.py", "{lr}", "{opt}", "{steps}"], "metric": {"name": "loss"},
    "space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, "opt": ["adam", "sgd"]},
    "strategy": {"type": "pbt", "population": 4, "interval": {"param": "steps", "every": 5, "max": 20},
                 "mutations": {"lr": {"factor": [0.8, 1.2]}, "opt": {"values": ["adam", "sgd"]}}},
}


def test_a_pbt_spec_runs_its_population_with_the_first_interval_as_budget() -> None:
    spec = parse_spec(SPEC)
    assert total_trials(spec) == 4
    assert spec.strategy.quantile == 0.25 and spec.strategy.resample_probability == 0.25  # the defaults
    budget = budget_of(spec)
    assert budget is not None and (budget.param, budget.min, budget.max) == ("steps", 5, 20)
    first = [params_at(spec, i) for i in range(4)]
    assert first == [params_at(parse_spec(SPEC), i) for i in range(4)]  # seeded: the same every time
    assert all(1e-4 <= p["lr"] <= 1e-1 and p["opt"] in ("adam", "sgd") for p in first)
    assert summary(spec).startswith("strategy pbt (population 4, every 5 steps up to 20, quantile 0.25, mutating lr, opt)")
    assert parse_spec(spec.to_json_dict()) == spec  # stored and read back by the planner


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(SPEC)
    change(data)
    return data


@pytest.mark.parametrize("change, field, words", [
    (lambda d: d["strategy"]["mutations"].update(x={"factor": [2.0]}), "strategy.mutations.x", "'x' is not in space"),
    (lambda d: d["strategy"]["mutations"].update(opt={"factor": [2.0]}), "strategy.mutations.opt.factor",
     "'opt' is a list of non-numbers; mutate it with values"),
    (lambda d: d["strategy"]["mutations"].update(lr={"factor": [2.0], "values": [1, 2]}), "strategy.mutations.lr",
     "give exactly one of factor"),
    (lambda d: d["strategy"]["mutations"].update(lr={"factor": [0.0, 1.2]}), "strategy.mutations.lr.factor",
     "factors must be greater than 0 (got [0.0, 1.2])"),
    (lambda d: d["strategy"]["mutations"].update(lr={"values": [1]}), "strategy.mutations.lr.values", "at least 2"),
    (lambda d: d["strategy"].update(mutations={}), "strategy.mutations", "at least 1"),
    (lambda d: d["strategy"]["interval"].update(max=5), "strategy.interval.max", "must be more than every (got max=5, every=5)"),
    (lambda d: d["strategy"]["interval"].update(every=0), "strategy.interval.every", "greater than or equal to 1"),
    (lambda d: d["strategy"].update(quantile=0.9), "strategy.quantile", "less than or equal to 0.5 (got 0.9)"),
    (lambda d: d["strategy"].update(population=1), "strategy.population", "greater than or equal to 2"),
    (lambda d: d["strategy"].update(resample_probability=1.5), "strategy.resample_probability", "less than or equal to 1"),
    (lambda d: d["space"].update(steps=[1]), "strategy.interval.param", "'steps' is also in space"),
    (lambda d: d.update(early_stop={"type": "median"}), "early_stop", "strategy pbt decides at each interval itself"),
    (lambda d: d.update(repeats=2), "repeats", "repeats must be 1 (got 2)"),
    (lambda d: d.update(objectives=[{"name": "loss"}, {"name": "acc", "mode": "max"}]), "metric",
     "early stopping compares one metric"),
])
def test_errors_name_the_field_and_the_value(change: Callable[[dict[str, Any]], None], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_with(change))
    assert any(path == field and words in message for path, message in err.value.errors), err.value.errors
