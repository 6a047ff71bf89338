"""Model-based suggestions: exact space mapping, rebuilt from history, spread when parallel."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spotsweep.services.planner.search import ModelSearch, TrialRecord
from spotsweep.shared.optuna_space import distributions, from_optuna, to_optuna
from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec import SweepSpec, parse_spec
from spotsweep.shared.states import TrialState

SPACE: dict[str, Any] = {
    "x": {"type": "uniform", "low": -5, "high": 5},
    "lr": {"type": "loguniform", "low": 1e-4, "high": 1.0},
    "n": {"type": "int", "low": 1, "high": 10, "step": 3},
    "c": [1, 1.0, True, "a"],
}


def make(kind: str, objectives: int = 1, **strategy: Any) -> SweepSpec:
    if kind not in ("cmaes", "nsga2"):
        strategy.pop("population", None)
    metric: Any = {"name": "loss"} if objectives == 1 else [{"name": f"m{i}"} for i in range(objectives)]
    return parse_spec({"name": "s", "command": ["t"], "metric": metric, "space": SPACE,
                       "strategy": {"type": kind, "trials": 200, "seed": 7, **strategy}})


def loss(p: dict[str, Any]) -> float:
    return (p["x"] - 1.5) ** 2 + abs(math.log10(p["lr"]) + 2) + (p["n"] - 7) ** 2 / 10


def run(search: ModelSearch, n: int, objectives: int = 1) -> list[TrialRecord]:
    history: list[TrialRecord] = []
    for i in range(n):
        s = search.suggest(history, i)
        v = loss(s.params)
        values = (v,) if objectives == 1 else (v, -v + s.params["x"])
        history.append(TrialRecord(i, s.params, TrialState.COMPLETED, values, attrs=s.attrs))
    return history


def test_space_maps_onto_optuna_exactly_and_back() -> None:
    spec = make("tpe")
    dists = distributions(spec.space)
    assert dists["n"].high == 10 and dists["n"].step == 3 and dists["lr"].log  # type: ignore[attr-defined]
    params = {"x": 0.5, "lr": 0.01, "n": 4, "c": True, "seed": 3}
    internal = to_optuna(spec.space, params)
    assert internal == {"x": 0.5, "lr": 0.01, "n": 4, "c": 2}  # True is position 2, not 1 == True
    back = from_optuna(spec.space, internal)
    assert back == {"x": 0.5, "lr": 0.01, "n": 4, "c": True} and type(back["c"]) is bool
    assert [type(from_optuna(spec.space, {**internal, "c": i})["c"]) for i in range(4)] == [int, float, bool, str]
    with pytest.raises(ValueError, match="not one of the choices"):
        to_optuna(spec.space, {**params, "c": "b"})


@pytest.mark.parametrize("kind", ["tpe", "cmaes"])
def test_suggestions_have_the_space_types_and_ranges(kind: str) -> None:
    history = run(ModelSearch(make(kind, population=6)), 16)
    for r in history:
        p = r.params
        assert list(p) == ["x", "lr", "n", "c"]
        assert type(p["x"]) is float and -5 <= p["x"] <= 5
        assert 1e-4 <= p["lr"] <= 1.0 and type(p["n"]) is int and p["n"] in (1, 4, 7, 10)
        assert any(type(p["c"]) is type(v) and p["c"] == v for v in (1, 1.0, True, "a"))


def test_tpe_learns_better_than_its_random_startup() -> None:
    history = run(ModelSearch(make("tpe", startup_trials=10)), 60)
    startup = min(r.values[0] for r in history[:10])  # type: ignore[index]
    assert min(r.values[0] for r in history[10:]) < startup  # type: ignore[index]


@pytest.mark.parametrize("kind", ["tpe", "cmaes", "nsga2"])
def test_same_history_gives_the_same_suggestion(kind: str) -> None:
    objectives = 2 if kind == "nsga2" else 1
    spec = make(kind, objectives, population=6)
    history = run(ModelSearch(spec), 20, objectives)
    # A restarted planner: a new object, the history as read back from the database.
    fresh = ModelSearch(parse_spec(spec.to_json_dict()))
    assert fresh.suggest(history, 20) == ModelSearch(spec).suggest(history, 20)
    assert ModelSearch(make(kind, objectives, population=6, seed=8)).suggest(history, 20).params != fresh.suggest(history, 20).params


def test_cmaes_state_lives_in_the_persisted_attrs() -> None:
    spec = make("cmaes", population=4)
    history = run(ModelSearch(spec), 13)
    generations = [r.attrs.get("cma:generation") for r in history]
    assert max(g for g in generations if g is not None) >= 2  # told whole generations, so it moved on
    # Without the attrs the sampler would start again from generation 0.
    stripped = [TrialRecord(r.index, r.params, r.state, r.values) for r in history]
    assert ModelSearch(spec).suggest(stripped, 13).attrs["cma:generation"] == 0
    assert ModelSearch(spec).suggest(history, 13).attrs["cma:generation"] >= generations[-1]


@pytest.mark.parametrize("kind", ["tpe", "cmaes", "nsga2"])
def test_parallel_suggestions_with_trials_in_flight_are_distinct_and_spread(kind: str) -> None:
    objectives = 2 if kind == "nsga2" else 1
    search = ModelSearch(make(kind, objectives, population=6))
    history = run(search, 24, objectives)
    suggestions = []
    for _ in range(8):  # 8 suggestions, each with the earlier ones still running
        s = search.suggest(history, len(history))
        suggestions.append(s.params)
        history.append(TrialRecord(len(history), s.params, TrialState.RUNNING, attrs=s.attrs))
    assert len({tuple(sorted(p.items(), key=repr)) for p in suggestions}) == 8
    xs = [p["x"] for p in suggestions]
    assert max(xs) - min(xs) > 0.2  # not a cloud around one point


def test_failed_pruned_and_unreported_trials_are_kept_apart() -> None:
    search = ModelSearch(make("tpe"))
    base = run(search, 12)
    history = [*base,
               TrialRecord(12, base[0].params, TrialState.FAILED),
               TrialRecord(13, base[1].params, TrialState.COMPLETED, None),  # completed without the metric
               TrialRecord(14, base[2].params, TrialState.PRUNED, curve={1: 9.0, 3: 8.0}),
               TrialRecord(15, base[3].params, TrialState.QUEUED)]
    trials = search.study(history, 16).get_trials()
    assert [t.state.name for t in trials[12:]] == ["FAIL", "FAIL", "PRUNED", "RUNNING"]
    assert trials[14].intermediate_values == {1: 9.0, 3: 8.0}
    assert trials[0].value == base[0].values[0]  # type: ignore[index]


def test_gp_runs_with_torch_and_spreads_batch_suggestions() -> None:
    search = ModelSearch(make("gp", startup_trials=4))
    history = run(search, 6)
    suggestions = []
    for _ in range(3):
        s = search.suggest(history, len(history))
        suggestions.append(tuple(s.params.values()))
        history.append(TrialRecord(len(history), s.params, TrialState.RUNNING, attrs=s.attrs))
    assert len(set(suggestions)) == 3


def test_gp_without_torch_names_the_strategy_and_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(SpecError) as info:
        ModelSearch(make("gp"))
    assert info.value.errors == [("strategy.type", "gp needs torch, which is not installed where the planner runs: "
                                  "pip install 'spotsweep[gp]' (the CPU build is enough), or use strategy tpe")]


def test_a_pruned_trial_enters_the_study_with_its_rungs_and_its_curve() -> None:
    search = ModelSearch(make("tpe"))
    base = run(search, 4)
    history = [*base,
               TrialRecord(4, base[0].params, TrialState.PRUNED, rungs={1: 7.0, 3: 6.5}),  # successive halving
               TrialRecord(5, base[1].params, TrialState.PRUNED, curve={1: 9.0, 2: 8.0}, rungs={1: 9.0})]  # while running
    trials = search.study(history, 6).get_trials()
    assert trials[4].intermediate_values == {1: 7.0, 3: 6.5}
    assert trials[5].intermediate_values == {1: 9.0, 2: 8.0}


def test_a_completed_trial_with_a_nan_objective_is_a_failed_one_for_the_sampler() -> None:
    search = ModelSearch(make("tpe"))
    base = run(search, 3)
    history = [*base, TrialRecord(3, base[0].params, TrialState.COMPLETED, (math.nan,)),
               TrialRecord(4, base[1].params, TrialState.COMPLETED, (math.inf,))]
    assert [t.state.name for t in search.study(history, 5).get_trials()[3:]] == ["FAIL", "FAIL"]
    assert search.suggest(history, 5).params  # and suggesting still works


def test_successive_halving_trials_are_ranked_by_their_rungs_not_lied_about() -> None:
    """Under early_stop hyperband, a trial waiting at a rung and a promoted one in flight
    are known by their rung values: TPE sees them as pruned there (ranked by their highest
    rung), not as running (constant liar would count the promoted ones, the best so far, as
    the worst) nor as failed (telling nothing). A fresh trial in flight is still running."""
    search = ModelSearch(make("tpe"))
    params = {"x": 1.0, "lr": 0.01, "n": 7, "c": "a"}
    history = [
        TrialRecord(0, params, TrialState.PAUSED, rungs={3: 0.5}),
        TrialRecord(1, params, TrialState.RUNNING, rungs={3: 0.2, 9: 0.1}),  # promoted to 27, in flight
        TrialRecord(2, params, TrialState.RUNNING),  # its first run
        TrialRecord(3, params, TrialState.PAUSED, rungs={3: math.nan}),  # diverged at its rung
        TrialRecord(4, params, TrialState.COMPLETED, (0.05,), rungs={3: 0.2, 9: 0.1}),
    ]
    trials = search.study(history, 5).get_trials(deepcopy=False)
    seen = [(t.state.name, t.intermediate_values) for t in trials]
    assert seen[0] == ("PRUNED", {3: 0.5})
    assert seen[1] == ("PRUNED", {3: 0.2, 9: 0.1})
    assert seen[2] == ("RUNNING", {})
    assert seen[3][0] == "FAIL"
    assert trials[4].state.name == "COMPLETE" and trials[4].values == [0.05]
