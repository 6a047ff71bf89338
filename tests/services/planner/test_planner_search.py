"""The planner driving the search, handlers called directly over the in-memory repositories:
successive halving promotes by relaunching the same trial with a larger budget
(and prunes), median stopping prunes a running trial and stops its run,
model-based suggestions survive a planner restart, budgets stop launches, the
smoke stage gates the sweep, and ``extend`` continues a finished sweep. A TPE
sweep's restart runs over PostgreSQL too, whose adapter keeps search histories
between transactions (:mod:`.histories`) that a restart loses."""

from __future__ import annotations

from typing import Any

import pytest

from spotsweep.services.planner.bodies import extension
from spotsweep.services.planner.handlers import handle_sweep_message
from spotsweep.shared.messages import StopTrial, TrialMessage, TrialProgress

BASE: dict[str, Any] = {
    "name": "search",
    "command": ["python", "train.py", "--x", "{x}"],
    "metric": {"name": "loss", "mode": "min"},
    "resources": {"gpus": 0, "class": "cpu"},
}
ASHA = {**BASE, "command": [*BASE["command"], "--steps", "{steps}"], "space": {"x": [1, 2, 3, 4]}, "max_concurrent": 1,
        "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3, "order": "listed",
                     "promotion": "async"}}


def run(h: Any, msg: TrialMessage, loss: float, **kw: Any) -> None:
    h.start(msg, run_id=f"r{msg.trial_id}-{msg.attempt}")
    h.finish(msg, "completed", run_id=f"r{msg.trial_id}-{msg.attempt}", metrics={"loss": loss}, **kw)


def test_asha_promotes_by_relaunching_the_same_trial_with_the_next_budget_and_prunes_the_rest(h: Any) -> None:
    h.submit(ASHA)
    first = h.published(1)[0]
    assert first.params == {"x": 1, "steps": 1} and first.argv[-2:] == ["--steps", "1"]
    run(h, first, 0.5)  # first at rung 1: promoted
    again = h.published(1)[0]
    assert (again.trial_id, again.attempt, again.params["steps"]) == (first.trial_id, 2, 3)
    assert again.argv[-1] == "3"  # the agent resumes it from its checkpoint, to step 3
    run(h, again, 0.4)  # first at rung 3: promoted to the top
    top = h.published(1)[0]
    assert (top.trial_id, top.params["steps"]) == (first.trial_id, 9)
    run(h, top, 0.3)
    row = h.trial(first.trial_id)
    assert row["state"] == "completed" and row["params"]["steps"] == 9 and row["rungs"] == {"1": 0.5, "3": 0.4}
    second = h.published(1)[0]
    run(h, second, 0.9)  # worse than the best 1/3 at rung 1
    assert h.trial(second.trial_id)["state"] == "pruned" and "best 1/3" in h.trial(second.trial_id)["error"]
    third = h.published(1)[0]
    assert third.index == 2 and third.params["steps"] == 1


MEDIAN = {**BASE, "space": {"x": [1, 2]}, "max_concurrent": 2,
          "early_stop": {"type": "median", "startup_trials": 1, "min_trials": 1}}


def progress(h: Any, msg: TrialMessage, run_id: str, points: list[tuple[int, float]]) -> None:
    h.event(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, run_id=run_id, points=points))


def test_median_stopping_prunes_a_running_trial_and_stops_its_run(h: Any) -> None:
    h.submit(MEDIAN)
    good, bad = h.published(2)
    assert good.progress and bad.progress  # their agents send the objective while they run
    h.start(good, run_id="g")
    progress(h, good, "g", [(1, 1.0), (2, 0.8), (3, 0.6)])
    h.finish(good, "completed", run_id="g", metrics={"loss": 0.6})
    h.start(bad, run_id="b")
    progress(h, bad, "b", [(1, 1.1)])  # worse than the median (1.0) at step 1
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.run_id, stop.reason) == ("b", "pruned")
    row = h.trial(bad.trial_id)
    assert row["state"] == "pruned" and row["metrics"] == {"loss": 1.1} and "median" in row["error"]
    progress(h, bad, "b", [(2, 0.1)])  # late points of a pruned trial change nothing
    assert h.trial(bad.trial_id)["state"] == "pruned"


TPE = {**BASE, "space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}}, "max_concurrent": 2,
       "strategy": {"type": "tpe", "trials": 8, "seed": 3, "startup_trials": 2}}


def drive(h: Any, sweep_id: str, restart_after: int | None = None) -> list[float]:
    """Run a TPE sweep to its end with loss = (x - 0.3)^2; a fresh planner takes over after some trials."""
    h.submit(TPE, sweep_id)
    xs = []
    while True:
        msgs = h.published(timeout=0.5)
        if not msgs:
            return xs
        for msg in msgs:
            xs.append(msg.params["x"])
            if restart_after is not None and len(xs) == restart_after:
                h.deps = h.planner()  # caches and search state gone, as in a restart
            run(h, msg, (msg.params["x"] - 0.3) ** 2)


@pytest.mark.parametrize("h", ["memory", "postgres"], indirect=True)
def test_model_based_suggestions_are_rebuilt_from_the_database_after_a_planner_restart(h: Any) -> None:
    straight = drive(h, "tpe-a-000000ad")
    restarted = drive(h, "tpe-b-000000ae", restart_after=4)
    assert len(straight) == 8 and len(set(straight)) == 8
    assert restarted == straight  # the same history and seed give the same suggestions
    assert h.sweep("tpe-b-000000ae")["state"] == "completed"


def test_a_budget_cap_stops_launching_and_the_sweep_ends_with_the_reason(h: Any) -> None:
    spec = {**BASE, "space": {"x": list(range(10))}, "max_concurrent": 1, "budget": {"max_gpu_hours": 2.5}}
    h.submit(spec)
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, duration=3600.0)  # each trial takes a GPU-hour
    assert h.published(timeout=0.3) == []  # a third would pass 2.5 GPU-hours
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed" and sweep["total_trials"] == 2 and "budget.max_gpu_hours" in sweep["note"]


SMOKE = {**ASHA, "max_concurrent": 4, "smoke": {"trials": 2, "budget": 1}}


def test_smoke_trials_run_first_and_release_the_sweep_when_they_pass(h: Any) -> None:
    h.submit(SMOKE)
    smoke = h.published(2)
    assert sorted(m.trial_name for m in smoke) == ["search_smoke_0", "search_smoke_1"]
    assert all(m.params["steps"] == 1 for m in smoke) and h.published(timeout=0.3) == []  # the rest waits
    run(h, smoke[0], 0.5)
    assert h.published(timeout=0.3) == []
    run(h, smoke[1], 0.6)
    assert len(h.published(4)) == 4  # released


def test_a_failing_smoke_trial_stops_the_sweep_before_the_rest_is_launched(h: Any) -> None:
    h.submit(SMOKE)
    first, second = sorted(h.published(2), key=lambda m: m.trial_name)
    h.start(first, run_id="s0")
    h.finish(first, "failed", run_id="s0", error="Traceback...\nImportError: no module named flash_attn", exit_code=1)
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "failed" and "smoke trial 0 failed: ImportError" in sweep["error"]
    assert h.states("sw1-000000a0")[second.trial_id] == "cancelled" and h.published(timeout=0.3) == []


def test_extend_continues_a_finished_sweep_with_its_history(h: Any, delivery: Any) -> None:
    spec = {**BASE, "space": {"x": {"type": "uniform", "low": 0, "high": 1}}, "max_concurrent": 2,
            "strategy": {"type": "random", "trials": 2, "seed": 1}}
    h.submit(spec)
    first = h.published(2)
    for msg in first:
        run(h, msg, 0.1)
    assert h.sweep("sw1-000000a0")["state"] == "completed"
    cmd = extension("sw1-000000a0", version=0, trials=2)
    d = delivery(cmd.body, cmd.headers)
    handle_sweep_message(d, h.deps)
    handle_sweep_message(delivery(cmd.body, cmd.headers, redelivered=True), h.deps)  # applied once
    more = h.published(2)
    assert [m.index for m in more] == [2, 3] and h.published(timeout=0.3) == []
    assert h.sweep("sw1-000000a0")["state"] == "running" and h.sweep("sw1-000000a0")["total_trials"] == 4
    for msg in more:
        run(h, msg, 0.2)
    assert h.sweep("sw1-000000a0")["state"] == "completed"
    assert [h.trial(m.trial_id)["params"] for m in first] == [m.params for m in first]  # history intact


HYPERBAND = {**BASE, "space": {"x": [1, 2, 3]}, "max_concurrent": 3,
             "early_stop": {"type": "hyperband", "budget": {"min": 1, "max": 9}, "eta": 3, "brackets": 1}}


def test_hyperband_without_a_budget_parameter_judges_running_trials_at_each_rung(h: Any) -> None:
    h.submit(HYPERBAND)
    a, b, _ = h.published(3)
    h.start(a, run_id="a")
    progress(h, a, "a", [(1, 0.5), (2, 0.45), (3, 0.4)])  # first at rungs 1 and 3: goes on
    assert h.trial(a.trial_id)["rungs"] == {"1": 0.5, "3": 0.4} and h.told(timeout=0.3) is None
    h.start(b, run_id="b")
    progress(h, b, "b", [(1, 0.9)])  # outside the best third at rung 1
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.run_id, stop.reason) == ("b", "pruned")
    assert h.trial(b.trial_id)["state"] == "pruned" and h.trial(a.trial_id)["state"] == "running"


HOUR = 3600.0
CAPPED_ASHA = {**ASHA, "space": {"x": [1, 2, 3, 4, 5, 6]}}


def test_a_promotion_that_would_pass_a_cap_completes_the_trial_at_its_rung(h: Any) -> None:
    h.submit({**CAPPED_ASHA, "budget": {"max_gpu_hours": 4.5}})
    first = h.published(1)[0]
    run(h, first, 0.5, duration=HOUR)  # an hour a step: to 3 steps is 2 more hours, 3 in all: fits
    again = h.published(1)[0]
    assert (again.trial_id, again.params["steps"]) == (first.trial_id, 3)
    run(h, again, 0.4, duration=2 * HOUR)  # to 9 steps would be 6 more hours: 9 in all
    row = h.trial(first.trial_id)
    assert (row["state"], row["params"]["steps"], row["attempts"]) == ("completed", 3, 2)
    assert row["rungs"] == {"1": 0.5, "3": 0.4} and row["metrics"] == {"loss": 0.4}
    assert h.published(timeout=0.3) == []  # and no new trial: it could not be promoted either
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed" and sweep["total_trials"] == 1
    assert sweep["note"].startswith("budget.max_gpu_hours: 3.00 GPU-h used, 9.00 expected with the promotion, the cap is 4.5")


def test_asha_charges_a_new_trial_its_first_rung_not_a_whole_trial(h: Any) -> None:
    h.submit({**CAPPED_ASHA, "budget": {"max_gpu_hours": 12}})
    msg = h.published(1)[0]
    for hours in (1, 2, 6):  # the first trial climbs to the top budget, 9 GPU-hours in all
        run(h, msg, 0.5, duration=hours * HOUR)
        msg = h.published(1)[0]
    # The next trial is charged 1 step (an hour): 10 <= 12. A whole trial (9 hours) would not fit.
    assert (msg.index, msg.params["steps"]) == (1, 1)
    assert h.trial("sw1-000000a0.0")["params"]["steps"] == 9
    for index in (1, 2, 3):  # 10, 11, then 12 GPU-hours: each pruned at rung 1
        assert msg.index == index
        run(h, msg, 0.9, duration=HOUR)
        msg = next(iter(h.published(timeout=0.3)), msg)
    assert h.states("sw1-000000a0") == {"sw1-000000a0.0": "completed", "sw1-000000a0.1": "pruned", "sw1-000000a0.2": "pruned", "sw1-000000a0.3": "pruned"}
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed"
    assert sweep["note"] == "budget.max_gpu_hours: 12.00 GPU-h used, 13.00 expected with one more trial, the cap is 12"


def test_a_cost_cap_stops_launching_at_the_price(h: Any) -> None:
    spec = {**BASE, "space": {"x": list(range(10))}, "max_concurrent": 1, "budget": {"max_cost": 5},
            "pricing": {"gpu_hour": 2.0}}
    h.submit(spec)
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, duration=HOUR)  # 2.00 a trial
    assert h.published(timeout=0.3) == []  # a third would spend 6.00
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed" and sweep["total_trials"] == 2
    assert sweep["note"] == "budget.max_cost: 4.00 spent, 6.00 expected with one more trial, the cap is 5"


def age(h: Any, sweep_id: str, seconds: float, trials: str = "all") -> None:
    """Move a sweep's clock back (as if it had run that much longer ago); no waiting in the test."""
    h.memory.sweeps[sweep_id]["created_at"] -= seconds
    for row in h.memory.trials.values():
        if row["sweep_id"] == sweep_id and (trials == "all" or row["state"] not in ("completed", "pruned", "failed", "cancelled")):
            row["created_at"] -= seconds
            row["finished_at"] = row["finished_at"] and row["finished_at"] - seconds


WALL = {**BASE, "space": {"x": list(range(10))}, "max_concurrent": 1, "budget": {"wall_time": "1h"}}


def test_wall_time_refuses_a_trial_that_could_not_finish_in_time(h: Any) -> None:
    h.submit(WALL)
    run(h, h.published(1)[0], 0.1, duration=600.0)  # trials take 10 minutes
    second = h.published(1)[0]
    h.start(second, run_id="s")
    age(h, "sw1-000000a0", 3300, trials="in flight")  # the sweep has been running 55 minutes when the second ends
    h.finish(second, "completed", run_id="s", metrics={"loss": 0.2}, duration=600.0)
    assert h.published(timeout=0.3) == []  # 55 + 10 minutes would pass the hour
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed" and sweep["total_trials"] == 2
    assert sweep["note"].startswith("budget.wall_time: 3300s elapsed, a trial takes about 600s, the cap is 3600s")


def test_extend_after_a_cap_with_a_larger_budget_runs_on(h: Any, delivery: Any) -> None:
    spec = {**BASE, "space": {"x": list(range(10))}, "max_concurrent": 1, "budget": {"max_gpu_hours": 2.5}}
    h.submit(spec)
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, duration=HOUR)
    assert h.sweep("sw1-000000a0")["state"] == "completed" and h.sweep("sw1-000000a0")["total_trials"] == 2
    cmd = extension("sw1-000000a0", version=0, budget={"max_gpu_hours": 4.5})
    handle_sweep_message(delivery(cmd.body, cmd.headers), h.deps)
    third = h.published(1)[0]
    assert third.index == 2 and h.sweep("sw1-000000a0")["state"] == "running" and h.sweep("sw1-000000a0")["note"] is None
    run(h, third, 0.1, duration=HOUR)
    run(h, h.published(1)[0], 0.1, duration=HOUR)
    assert h.published(timeout=0.3) == []  # 4 GPU-hours used: a fifth would pass 4.5
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "completed" and sweep["total_trials"] == 4 and "the cap is 4.5" in sweep["note"]


def test_the_time_a_finished_sweep_waited_for_extend_does_not_count_against_wall_time(h: Any, delivery: Any) -> None:
    h.submit({**WALL, "space": {"x": list(range(4))}, "strategy": {"type": "grid", "max_trials": 2}})
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, duration=60.0)
    assert h.sweep("sw1-000000a0")["state"] == "completed"
    age(h, "sw1-000000a0", 86400)  # it ended a day ago, after running for a moment
    cmd = extension("sw1-000000a0", version=0, trials=2)
    handle_sweep_message(delivery(cmd.body, cmd.headers), h.deps)
    more = h.published(1)
    assert [m.index for m in more] == [2] and h.sweep("sw1-000000a0")["note"] is None


def test_a_smoke_trial_with_a_nan_objective_fails_the_sweep_with_a_clear_error(h: Any) -> None:
    h.submit(SMOKE)
    first, second = sorted(h.published(2), key=lambda m: m.trial_name)
    run(h, first, float("nan"))
    sweep = h.sweep("sw1-000000a0")
    assert sweep["state"] == "failed"
    assert sweep["error"].startswith("smoke trial 0 completed with loss = nan: not a finite number (did the run diverge?)")
    assert h.states("sw1-000000a0")[second.trial_id] == "cancelled" and h.published(timeout=0.3) == []


def test_median_stopping_judges_the_first_step_of_an_event_that_carries_several(h: Any) -> None:
    h.submit({**MEDIAN, "early_stop": {**MEDIAN["early_stop"], "interval_steps": 10}})
    good, bad = h.published(2)
    h.start(good, run_id="g")
    progress(h, good, "g", [(s, 1.0) for s in range(1, 15)])
    h.finish(good, "completed", run_id="g", metrics={"loss": 1.0})
    h.start(bad, run_id="b")
    progress(h, bad, "b", [(s, 2.0) for s in range(1, 8)])  # steps 1..7 in one event, worse at each
    stop = h.told()
    assert isinstance(stop, StopTrial) and (stop.run_id, stop.reason) == ("b", "pruned")
    assert "by step 1 " in h.trial(bad.trial_id)["error"]  # judged at step 1, as Optuna does, not at step 10


NSGA2 = {**BASE, "metric": [{"name": "loss"}, {"name": "cost", "mode": "min"}], "max_concurrent": 2,
         "space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
         "strategy": {"type": "nsga2", "trials": 12, "seed": 5, "population": 4}}


def drive_nsga2(h: Any, sweep_id: str, restart_after: int | None = None) -> list[float]:
    """Run the NSGA-II sweep to its end (two objectives that trade off); a fresh planner takes over half way."""
    h.submit(NSGA2, sweep_id)
    xs: list[float] = []
    while msgs := h.published(timeout=0.5):
        for msg in msgs:
            xs.append(msg.params["x"])
            if restart_after is not None and len(xs) == restart_after:
                h.deps = h.planner()
            x, run_id = msg.params["x"], f"r{msg.trial_id}"
            h.start(msg, run_id=run_id)
            h.finish(msg, "completed", run_id=run_id, metrics={"loss": (x - 0.2) ** 2, "cost": (x - 0.8) ** 2})
    return xs


def test_nsga2_generations_and_parents_live_in_the_database_across_a_planner_restart(h: Any) -> None:
    straight = drive_nsga2(h, "nsga-a-000000af")
    restarted = drive_nsga2(h, "nsga-b-000000b0", restart_after=6)  # mid generation 1: its parents come from the database
    assert len(straight) == 12 and restarted == straight
    rows = sorted((r for r in h.memory.trials.values() if r["sweep_id"] == "nsga-b-000000b0"), key=lambda r: r["idx"])
    generations = [int(r["search_attrs"]["NSGAIISampler:generation"]) for r in rows]
    # The sampler's per-trial state, persisted with each trial: generations follow each other (a trial launched
    # while the last of a generation still runs is drawn from that generation).
    assert generations == sorted(generations) and generations[0] == 0 and generations[-1] >= 2, generations
    assert {"NSGAIISampler:parent:1", "NSGAIISampler:parent:2"} <= set(h.sweep("nsga-b-000000b0")["search_attrs"])  # and the study's


def test_a_model_based_sampler_is_told_the_curves_of_pruned_trials(h: Any, monkeypatch: Any) -> None:
    from spotsweep.services.planner.search import Search

    told: list[Any] = []
    propose = Search.propose
    monkeypatch.setattr(Search, "propose", lambda self, index, history=(), study_attrs=None:
                        (told.append((index, list(history))), propose(self, index, history, study_attrs))[1])
    spec = {**TPE, "max_concurrent": 1, "early_stop": {"type": "median", "startup_trials": 1, "min_trials": 1}}
    h.submit(spec)
    good = h.published(1)[0]
    h.start(good, run_id="g")
    progress(h, good, "g", [(1, 1.0), (2, 0.5), (3, 0.4)])
    h.finish(good, "completed", run_id="g", metrics={"loss": 0.4})
    bad = h.published(1)[0]
    h.start(bad, run_id="b")
    progress(h, bad, "b", [(1, 0.9)])
    progress(h, bad, "b", [(2, 0.8)])  # worse than the median: pruned
    assert h.trial(bad.trial_id)["state"] == "pruned" and len(h.published(1)) == 1
    index, history = told[-1]
    assert index == 2 and [(r.state.value, dict(r.curve)) for r in history] == [("completed", {}), ("pruned", {1: 0.9, 2: 0.8})]
