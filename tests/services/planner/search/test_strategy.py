"""The planner-facing Search: proposals, budgets filled in, ASHA promotions by relaunch,
repeats, smoke params, and search state across a planner restart."""

from __future__ import annotations

import random
from typing import Any

import pytest

from spotsweep.services.planner.search import Action, Search, TrialRecord, Usage
from spotsweep.shared.space import params_at
from spotsweep.shared.spec import SweepSpec, parse_spec
from spotsweep.shared.states import TrialState

SPACE = {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, "depth": [2, 4, 8]}


def make(strategy: dict[str, Any], **extra: Any) -> SweepSpec:
    return parse_spec({"name": "s", "command": ["t", "{lr}", "{depth}", "{steps}"], "metric": {"name": "loss"},
                       "space": SPACE, "strategy": strategy, **extra})


def test_static_proposals_are_params_at() -> None:
    spec = make({"type": "random", "trials": 10, "seed": 1}, early_stop={"type": "hyperband", "budget": {"param": "steps", "min": 1, "max": 27}})
    search = Search(spec)
    for i in range(10):
        p = search.propose(i).params
        assert {k: v for k, v in p.items() if k != "steps"} == params_at(spec, i)
        assert p["steps"] == search.stopper.initial_budget(i) in (1, 3, 9, 27)  # type: ignore[union-attr]
    with pytest.raises(IndexError):
        search.propose(10)


def loss(p: dict[str, Any], steps: int) -> float:
    import math

    return (math.log10(p["lr"]) + 2.5) ** 2 + 1 / p["depth"] + 3 / steps


def test_asha_promotes_by_relaunching_and_prunes() -> None:
    """A small planner loop: each run goes to its budget, ends, and is promoted (same trial,
    larger budget, resumed) or pruned. Trials launched as slots free up, nobody waits for a rung."""
    spec = make({"type": "asha", "budget": {"param": "steps", "min": 1, "max": 27}, "eta": 3, "trials": 30, "seed": 0,
                 "promotion": "async"})
    search = Search(spec)
    records: dict[int, TrialRecord] = {}
    runs: list[tuple[int, int]] = []  # (trial, budget) runs in the order they ran
    queue = []
    for i in range(30):
        p = search.propose(i, list(records.values())).params
        assert p["steps"] == 1
        records[i] = TrialRecord(i, p, TrialState.RUNNING)
        queue.append(i)
    while queue:
        i = queue.pop(0)
        r = records[i]
        budget = r.params["steps"]
        runs.append((i, budget))
        d = search.on_run_end(list(records.values()), r, loss(r.params, budget))
        rungs = {**r.rungs, **({d.rung: loss(r.params, budget)} if d.rung is not None else {})}
        if d.action == Action.PROMOTE:
            assert d.relaunch and d.budget == budget * 3
            records[i] = TrialRecord(i, {**r.params, "steps": d.budget}, TrialState.PENDING, rungs=rungs)
            queue.append(i)  # the same trial, resumed from its checkpoint with the larger budget
        else:
            state = TrialState.PRUNED if d.action == Action.PRUNE else TrialState.COMPLETED
            records[i] = TrialRecord(i, r.params, state, (loss(r.params, budget),), rungs=rungs)
    states = [r.state for r in records.values()]
    assert 1 <= states.count(TrialState.COMPLETED) < 10 and states.count(TrialState.PRUNED) > 15
    assert all(records[i].params["steps"] == 27 for i in records if records[i].state == TrialState.COMPLETED)
    spent = sum(b - (b // 3 if b > 1 else 0) for _, b in runs)  # steps run: a resumed run only adds the new steps
    assert spent < 0.4 * 30 * 27  # far less than running every trial to the end
    best = min(records.values(), key=lambda r: loss(r.params, 27))
    assert best.state == TrialState.COMPLETED or loss(best.params, 27) > min(loss(r.params, 27) for r in records.values()
                                                                                if r.state == TrialState.COMPLETED) - 0.2


def test_running_mode_stops_by_report() -> None:
    spec = parse_spec({"name": "s", "command": ["t", "{lr}"], "metric": {"name": "loss"}, "space": {"lr": SPACE["lr"]},
                       "strategy": {"type": "random", "trials": 5}, "early_stop": {"type": "median", "startup_trials": 1}})
    search = Search(spec)
    done = TrialRecord(0, {}, TrialState.COMPLETED, (1.0,), curve={1: 2.0, 2: 1.0})
    assert search.on_report([done], TrialRecord(1, {}, TrialState.RUNNING), 1, 3.0).action == Action.PRUNE
    assert search.on_report([done], TrialRecord(1, {}, TrialState.RUNNING), 1, 1.0).action == Action.CONTINUE
    assert search.on_run_end([done], TrialRecord(1, {}, TrialState.RUNNING), 1.0).action == Action.COMPLETE
    # With a budget parameter ASHA waits for the end of the run.
    asha = Search(make({"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "trials": 4}))
    assert asha.on_report([], TrialRecord(0, {"steps": 1}, TrialState.RUNNING), 1, 5.0).action == Action.CONTINUE


def test_model_search_survives_a_planner_restart() -> None:
    spec = make({"type": "tpe", "trials": 40, "seed": 4, "startup_trials": 5},
                early_stop={"type": "hyperband", "budget": {"param": "steps", "min": 1, "max": 9}})
    first = Search(spec)
    history: list[TrialRecord] = []
    study_attrs: dict[str, Any] = {}
    rng = random.Random(0)
    for i in range(15):
        proposal = first.propose(i, history, study_attrs)
        study_attrs = proposal.study_attrs if proposal.study_attrs is not None else study_attrs
        state = TrialState.COMPLETED if i < 11 else TrialState.RUNNING
        values = (loss(proposal.params, 9) + rng.random() * 0.01,) if state == TrialState.COMPLETED else None
        history.append(TrialRecord(i, proposal.params, state, values, attrs=proposal.attrs))
    # What a restarted planner has: the spec as stored (JSON), the rows, the sweep's study attrs.
    restarted = Search(parse_spec(spec.to_json_dict()))
    rows = [TrialRecord(r.index, dict(r.params), r.state, r.values, attrs=dict(r.attrs)) for r in reversed(history)]
    assert restarted.propose(15, rows, study_attrs) == first.propose(15, history, study_attrs)
    assert restarted.propose(15, rows, study_attrs).params["steps"] == first.stopper.initial_budget(15)  # type: ignore[union-attr]


def test_repeats_of_a_model_suggestion_share_its_params() -> None:
    spec = make({"type": "tpe", "trials": 6}, repeats=3, command=["t", "{lr}", "{depth}", "{seed}"])
    search = Search(spec)
    history: list[TrialRecord] = []
    for i in range(6):
        p = search.propose(i, history).params
        history.append(TrialRecord(i, p, TrialState.RUNNING))
    assert [h.params["seed"] for h in history] == [0, 1, 2, 0, 1, 2]
    assert {k: history[1].params[k] for k in SPACE} == {k: history[0].params[k] for k in SPACE}
    assert history[3].params["lr"] != history[0].params["lr"]
    assert search.total_trials == 18


def test_smoke_params_and_budget_verdicts() -> None:
    spec = make({"type": "asha", "budget": {"param": "steps", "min": 3, "max": 27}, "trials": 9},
                smoke={"trials": 2, "budget": 2}, budget={"max_trials": 5})
    search = Search(spec)
    assert [search.smoke_params(k)["steps"] for k in range(2)] == [2, 2]
    assert {k: v for k, v in search.smoke_params(1).items() if k != "steps"} == params_at(spec, 1)
    assert search.smoke([]).launch == (0, 1)
    assert search.may_launch(Usage(5, 0, 0)).reason == "budget.max_trials: 5 trial(s) launched, the cap is 5"
    tpe = Search(make({"type": "tpe", "trials": 9}, smoke={"trials": 1, "param": "depth", "budget": 2}, command=["t", "{lr}", "{depth}"]))
    assert tpe.smoke_params(0)["depth"] == 2 and 1e-4 <= tpe.smoke_params(0)["lr"] <= 1e-1


def test_asha_runs_are_estimated_per_budget_unit_for_launches_and_promotions() -> None:
    from spotsweep.shared.spec import Budget

    spec = make({"type": "random", "trials": 40, "seed": 1}, budget={"max_gpu_hours": 10},
                early_stop={"type": "hyperband", "budget": {"param": "steps", "min": 1, "max": 27}})
    search = Search(spec)
    used = Usage(10, 0, 0, trial_seconds=27 * 60.0, unit_seconds=60.0)  # a minute per step; whole trials took 27
    for i in range(8):  # a new trial is charged its first rung, whatever its bracket
        assert search.run_seconds(used, i) == 60.0 * search.stopper.initial_budget(i)  # type: ignore[union-attr]
    plain = {"type": "random", "trials": 4}
    assert Search(make(plain, command=["t", "{lr}", "{depth}"])).run_seconds(used, 0) == 27 * 60.0  # no budget parameter
    hour = 3600.0
    assert search.may_promote(Usage(10, 9 * hour, 0, unit_seconds=hour / 3), 1, 3).ok  # 2 steps: 40 more minutes
    verdict = search.may_promote(Usage(10, 9 * hour, 0, unit_seconds=hour / 3), 3, 9)  # 6 steps: 2 more hours
    assert not verdict.ok and verdict.reason.startswith("budget.max_gpu_hours: 9.00 GPU-h used, 11.00 expected")
    capped = Search(make(plain, budget={"max_trials": 1}, command=["t", "{lr}", "{depth}"]))
    assert capped.spec.budget == Budget(max_trials=1) and capped.may_promote(Usage(1, 0, 0), 1, 3).ok
