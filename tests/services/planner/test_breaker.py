"""The sweep's own breaker: the pure rule, then the planner applying it over the in-memory repositories."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from spotsweep.services.planner import store
from spotsweep.services.planner.breaker import DEFAULT_MAX_FAILED_TRIALS, broken
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.launch import top_up
from spotsweep.services.planner.memory import MemoryDb, memory_unit
from spotsweep.services.planner.service import on_events
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.errors import SpecError
from spotsweep.shared.messages import TrialFinished, TrialStarted, encode
from spotsweep.shared.spec import parse_spec

SID = "brk-000000a0"


def test_stops_a_sweep_once_enough_trials_failed_and_none_ran() -> None:
    assert broken({"failed": 2, "running": 3}, "boom", 3) is None
    reason = broken({"failed": 3, "running": 3, "cancelled": 1}, "Traceback\nModuleNotFoundError: No module named 'x'\n", 3)
    assert reason is not None
    assert "3 trials failed" in reason and "retries.max_failed_trials=3" in reason
    assert reason.endswith("the last error: ModuleNotFoundError: No module named 'x'") and "\n" not in reason


@pytest.mark.parametrize("ran", ["completed", "pruned", "paused"])
def test_one_trial_that_ran_keeps_the_sweep_going(ran: str) -> None:
    """Its failures are then its configurations' (a diverging learning rate), not its code's."""
    assert broken({"failed": 500, ran: 1}, "loss is NaN", 3) is None


def test_zero_turns_it_off_and_bad_data_means_nothing_known() -> None:
    assert broken({"failed": 10**9}, "x", 0) is None
    assert broken({"failed": "many", "completed": None}, None, 3) is None  # type: ignore[dict-item]
    assert broken({"failed": 5, "completed": -1}, 12, 3) == (  # a negative count is no count; an error not a string: none
        "stopped by its breaker: 5 trials failed (each after its retries) and none ran to its end "
        "(retries.max_failed_trials=3); the last error: none recorded")
    assert broken({"failed": True}, "x", 1) is None and broken({"failed": 4}, "x", "3") is None  # type: ignore[dict-item]
    huge = broken({"failed": 3}, "\x00" * 100_000, 3)
    assert huge is not None and len(huge) < 1000


def test_the_threshold_is_the_specs_with_a_field_named_error() -> None:
    spec = {"name": "b", "command": ["true"], "metric": {"name": "loss", "mode": "min"}, "space": {"x": [1]}}
    assert parse_spec(spec).retries.max_failed_trials == DEFAULT_MAX_FAILED_TRIALS
    assert parse_spec({**spec, "retries": {"max_failed_trials": 2}}).retries.max_failed_trials == 2
    with pytest.raises(SpecError, match="retries.max_failed_trials"):
        parse_spec({**spec, "retries": {"max_failed_trials": -1}})


def _planner(**retries: Any) -> tuple[PlannerDeps, MemoryDb]:
    spec = parse_spec({"name": "b", "command": ["true"], "metric": {"name": "loss", "mode": "min"},
                       "space": {"x": list(range(20))}, "strategy": {"type": "grid"}, "max_concurrent": 4,
                       "retries": retries})
    db = MemoryDb()
    deps = PlannerDeps(db=None, broker=MemoryBroker(), units=partial(memory_unit, db))  # type: ignore[arg-type]
    with deps.unit() as uow:
        uow.sweeps.insert(SID, spec.to_json_dict(), "b", 20, 0)
        top_up(uow, SID, spec, deps.search(SID, spec.to_json_dict()), window=None)
    return deps, db


def _end(deps: PlannerDeps, i: int, outcome: str = "failed", error: str = "exit code 1") -> Any:
    trial_id = store.trial_id_for(SID, i)
    events = [TrialStarted(sweep_id=SID, trial_id=trial_id, attempt=1, agent="a", run_id=f"r{i}"),
              TrialFinished(sweep_id=SID, trial_id=trial_id, attempt=1, outcome=outcome, agent="a",  # type: ignore[arg-type]
                            run_id=f"r{i}", failure="exit" if outcome == "failed" else None,
                            error=error if outcome == "failed" else None, metrics={"loss": 1.0})]
    return on_events(deps, SID, events, {e.message_id: encode(e) for e in events})


def test_the_planner_stops_a_sweep_that_fails_everywhere_as_stop_does() -> None:
    deps, db = _planner(max_failures=0, max_failed_trials=3)
    for i in range(2):
        assert not _end(deps, i, error=f"SyntaxError in trial {i}").cancel
    assert db.sweeps[SID]["state"] == "running"
    effects = _end(deps, 2, error="SyntaxError in trial 2")
    sweep = db.sweeps[SID]
    assert sweep["state"] == "failed" and effects.cancel  # the sweep's cancel goes to every agent
    assert "3 trials failed" in sweep["error"] and sweep["error"].endswith("the last error: SyntaxError in trial 2")
    states = {t["trial_id"]: t["state"] for t in db.trials.values()}
    assert [states[store.trial_id_for(SID, i)] for i in range(3)] == ["failed"] * 3
    rest = [t for t in db.trials.values() if t["idx"] >= 3]
    assert rest and all(t["state"] == "cancelled" and "stopped by its breaker" in t["error"] for t in rest)
    assert len(db.trials) == 6  # nothing more launched


def test_a_sweep_with_one_completed_trial_is_not_stopped() -> None:
    deps, db = _planner(max_failures=0, max_failed_trials=2)
    _end(deps, 0, outcome="completed")
    for i in range(1, 5):
        assert not _end(deps, i).cancel
    assert db.sweeps[SID]["state"] == "running"


def test_retried_attempts_are_not_trials_failed_for_good() -> None:
    deps, db = _planner(max_failures=3, max_failed_trials=2)
    for i in range(4):
        _end(deps, i)  # each goes back for its next attempt
    assert db.sweeps[SID]["state"] == "running"
