"""A strategy and a stopper added from outside: one model, one registration, nothing else touched.

The toy plugins live in this test; they validate in a spec, show up in the
error messages and the JSON Schema, and run through :class:`Search` as the
planner calls it. Taking them out again leaves the spec as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pytest
from pydantic import Field

from spotsweep.services.planner.search import Action, Search, StepDecision, TrialRecord
from spotsweep.services.planner.search import registry as planner_registry
from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec import parse_spec, spec_json_schema
from spotsweep.shared.spec_search import StopModel, StrategyModel, register_stop, register_strategy, strategy_types
from spotsweep.shared.spec_search import summary, unregister
from spotsweep.shared.states import TrialState

if TYPE_CHECKING:
    from spotsweep.shared.spec import SweepSpec


class DiagonalStrategy(StrategyModel):
    """Configuration ``c`` takes level ``c`` (wrapped) of every dimension: the grid's diagonal."""

    type: Literal["diagonal"] = "diagonal"
    trials: int = Field(ge=1)

    def design(self, spec: SweepSpec, config: int) -> dict[str, Any]:
        return {key: param.values[config % len(param.values)] for key, param in spec.space.items()}

    def problems(self, spec: SweepSpec) -> list[tuple[tuple[str | int, ...], str]]:
        return [(("space", k), "strategy diagonal takes lists only") for k, p in spec.space.items() if p.type != "choice"]

    def describe(self, spec: SweepSpec) -> str:
        return f" ({self.trials} along the diagonal)"


class ThresholdStop(StopModel):
    """Stop a trial as soon as it reports a value above ``above``."""

    type: Literal["threshold"] = "threshold"
    above: float


class Threshold:
    def __init__(self, stop: ThresholdStop, spec: SweepSpec) -> None:
        self.above = stop.above

    def initial_budget(self, index: int) -> int | None:
        return None

    def decide(self, history: Sequence[TrialRecord], trial: TrialRecord, step: int, value: float) -> StepDecision:
        return StepDecision(Action.PRUNE if value > self.above else Action.CONTINUE, reason="toy")


@pytest.fixture
def plugins() -> Iterator[None]:
    register_strategy(DiagonalStrategy)
    register_stop(ThresholdStop)
    planner_registry.register_stopper("threshold", Threshold)
    try:
        yield
    finally:
        unregister(DiagonalStrategy)
        unregister(ThresholdStop)
        planner_registry.unregister("threshold")


SPEC = {"name": "toy", "command": ["train", "{lr}", "{depth}"], "metric": {"name": "loss"},
        "space": {"lr": [0.1, 0.01, 0.001], "depth": [2, 4, 8, 16]},
        "strategy": {"type": "diagonal", "trials": 5}, "early_stop": {"type": "threshold", "above": 2.0}}


def test_a_registered_strategy_and_stopper_validate_and_run_through_search(plugins: None) -> None:
    spec = parse_spec(SPEC)
    assert isinstance(spec.strategy, DiagonalStrategy) and isinstance(spec.early_stop, ThresholdStop)
    assert parse_spec(spec.to_json_dict()) == spec
    assert summary(spec) == "strategy diagonal (5 along the diagonal), early_stop threshold"
    search = Search(spec)
    assert search.total_trials == 5 and search.model is None and search.wants_progress
    assert [search.propose(i).params for i in range(5)] == [
        {"lr": 0.1, "depth": 2}, {"lr": 0.01, "depth": 4}, {"lr": 0.001, "depth": 8}, {"lr": 0.1, "depth": 16},
        {"lr": 0.01, "depth": 2}]
    running = TrialRecord(0, search.propose(0).params, TrialState.RUNNING)
    assert search.on_report([], running, 1, 3.0).action == Action.PRUNE
    assert search.on_report([], running, 1, 1.0).action == Action.CONTINUE
    assert search.on_run_end([], running, 1.0).action == Action.COMPLETE


def test_a_registered_strategy_is_checked_and_listed_in_errors_and_the_schema(plugins: None) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "space": {"lr": {"type": "uniform", "low": 0.1, "high": 1.0}}, "command": ["t", "{lr}"]})
    assert ("space.lr", "strategy diagonal takes lists only") in err.value.errors
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "strategy": {"type": "diagonal"}})
    assert err.value.errors == [("strategy.trials", "required for strategy diagonal")]
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "strategy": {"type": "spiral"}})
    expected = "grid, random, subset, tpe, gp, cmaes, nsga2, asha, pbt, diagonal"
    assert err.value.errors == [("strategy.type", f"unknown type 'spiral' (expected one of: {expected})")]
    schema = json.dumps(spec_json_schema())
    assert '"DiagonalStrategy"' in schema and '"ThresholdStop"' in schema and '"diagonal"' in schema


def test_taking_a_plugin_out_restores_the_spec() -> None:
    register_strategy(DiagonalStrategy)
    unregister(DiagonalStrategy)
    assert "diagonal" not in strategy_types()
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "early_stop": None})
    assert err.value.errors[0][1].startswith("unknown type 'diagonal' (expected one of: grid, random, subset, tpe, gp, "
                                             "cmaes, nsga2, asha, pbt)")
    assert "DiagonalStrategy" not in json.dumps(spec_json_schema())


def test_a_type_cannot_be_registered_twice() -> None:
    class Another(StrategyModel):
        type: Literal["grid"] = "grid"

    with pytest.raises(ValueError, match="type grid is already registered"):
        register_strategy(Another)
    assert strategy_types() == ("grid", "random", "subset", "tpe", "gp", "cmaes", "nsga2", "asha", "pbt")
