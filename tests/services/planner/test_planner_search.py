"""The planner driving the search, handlers called directly over a real PostgreSQL:
successive halving promotes by relaunching the same trial with a larger budget
(and prunes), median stopping prunes a running trial and stops its run,
model-based suggestions survive a planner restart, budgets stop launches, the
smoke stage gates the sweep, and ``extend`` continues a finished sweep."""

from __future__ import annotations

from typing import Any

from spotsweep.services.planner.handlers import PlannerDeps, extension, handle_sweep_message
from spotsweep.shared.messages import StopTrial, TrialMessage, TrialProgress

BASE: dict[str, Any] = {
    "name": "search",
    "command": ["python", "train.py", "--x", "{x}"],
    "metric": {"name": "loss", "mode": "min"},
    "resources": {"gpus": 0, "class": "cpu"},
}
ASHA = {**BASE, "command": [*BASE["command"], "--steps", "{steps}"], "space": {"x": [1, 2, 3, 4]}, "max_concurrent": 1,
        "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3}}


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
                h.deps = PlannerDeps(db=h.db, broker=h.broker)  # caches and search state gone, as in a restart
            run(h, msg, (msg.params["x"] - 0.3) ** 2)


def test_model_based_suggestions_are_rebuilt_from_the_database_after_a_planner_restart(h: Any) -> None:
    straight = drive(h, "tpe-a")
    restarted = drive(h, "tpe-b", restart_after=4)
    assert len(straight) == 8 and len(set(straight)) == 8
    assert restarted == straight  # the same history and seed give the same suggestions
    assert h.sweep("tpe-b")["state"] == "completed"


def test_a_budget_cap_stops_launching_and_the_sweep_ends_with_the_reason(h: Any) -> None:
    spec = {**BASE, "space": {"x": list(range(10))}, "max_concurrent": 1, "budget": {"max_gpu_hours": 2.5}}
    h.submit(spec)
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, duration=3600.0)  # each trial takes a GPU-hour
    assert h.published(timeout=0.3) == []  # a third would pass 2.5 GPU-hours
    sweep = h.sweep("sw1")
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
    sweep = h.sweep("sw1")
    assert sweep["state"] == "failed" and "smoke trial 0 failed: ImportError" in sweep["error"]
    assert h.states("sw1")[second.trial_id] == "cancelled" and h.published(timeout=0.3) == []


def test_extend_continues_a_finished_sweep_with_its_history(h: Any, delivery: Any) -> None:
    spec = {**BASE, "space": {"x": {"type": "uniform", "low": 0, "high": 1}}, "max_concurrent": 2,
            "strategy": {"type": "random", "trials": 2, "seed": 1}}
    h.submit(spec)
    first = h.published(2)
    for msg in first:
        run(h, msg, 0.1)
    assert h.sweep("sw1")["state"] == "completed"
    cmd = extension("sw1", version=0, trials=2)
    d = delivery(cmd.body, cmd.headers)
    handle_sweep_message(d, h.deps)
    handle_sweep_message(delivery(cmd.body, cmd.headers, redelivered=True), h.deps)  # applied once
    more = h.published(2)
    assert [m.index for m in more] == [2, 3] and h.published(timeout=0.3) == []
    assert h.sweep("sw1")["state"] == "running" and h.sweep("sw1")["total_trials"] == 4
    for msg in more:
        run(h, msg, 0.2)
    assert h.sweep("sw1")["state"] == "completed"
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
