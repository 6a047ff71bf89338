"""Planner logic over the in-memory repositories: ``on_events`` decides and returns
its effects, with no PostgreSQL and no broker (the same code runs over PostgreSQL
in the handler tests)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from spotsweep.services.planner import store
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.exploit import copy_pending
from spotsweep.services.planner.launch import top_up
from spotsweep.services.planner.memory import MemoryDb, memory_unit
from spotsweep.services.planner.service import on_events
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.messages import TrialFinished, TrialProgress, TrialStarted, encode
from spotsweep.shared.spec import parse_spec

SID = "mem-000000a0"


def _spec(**extra: Any) -> dict[str, Any]:
    return {"name": "m", "command": ["true"], "metric": {"name": "loss", "mode": "min"},
            "space": {"x": [1, 2, 3, 4, 5, 6]}, "strategy": {"type": "grid"}, "max_concurrent": 2, **extra}


def _planner(spec: dict[str, Any]) -> tuple[PlannerDeps, MemoryDb]:
    db = MemoryDb()
    deps = PlannerDeps(db=None, broker=MemoryBroker(), units=partial(memory_unit, db))  # type: ignore[arg-type]
    parsed = parse_spec(spec)
    with deps.unit() as uow:
        uow.sweeps.insert(SID, parsed.to_json_dict(), "m", 6, 0)
        top_up(uow, SID, parsed, deps.search(SID, parsed.to_json_dict()), window=None)
    return deps, db


def _decide(deps: PlannerDeps, *events: Any, inside: tuple[str, ...] = ()) -> Any:
    return on_events(deps, SID, list(events), {e.message_id: encode(e) for e in events}, inside)


def _started(i: int, run: str = "r") -> TrialStarted:
    return TrialStarted(sweep_id=SID, trial_id=store.trial_id_for(SID, i), attempt=1, agent="a", run_id=run)


def _finished(i: int, loss: float, run: str = "r") -> TrialFinished:
    return TrialFinished(sweep_id=SID, trial_id=store.trial_id_for(SID, i), attempt=1, outcome="completed",
                         metrics={"loss": loss}, agent="a", run_id=run, duration=2.0)


def test_a_short_runs_start_and_end_in_one_batch_complete_it_and_launch_the_next() -> None:
    deps, db = _planner(_spec())
    assert [t["state"] for t in db.trials.values()] == ["pending", "pending"]
    start, end = _started(0), _finished(0, 0.5)
    effects = _decide(deps, start, end, inside=(start.message_id,))
    t0 = db.trials[store.trial_id_for(SID, 0)]
    assert (t0["state"], t0["metrics"], t0["run_id"], t0["run_seconds"]) == ("completed", {"loss": 0.5}, "r", 2.0)
    assert t0["started_at"] is not None and t0["finished_at"] is not None
    assert len(db.trials) == 3 and db.sweeps[SID]["next_index"] == 3  # the freed slot refilled
    assert (effects.stops, effects.cancel, effects.publish) == ([], False, True)
    assert set(db.events) == {start.message_id, end.message_id}  # both journaled, once


def test_a_redelivered_batch_changes_nothing() -> None:
    """Only its start is answered again: a start of an ended trial is told to stop."""
    deps, db = _planner(_spec())
    events = (_started(0), _finished(0, 0.5))
    _decide(deps, *events)
    before = {k: dict(v) for k, v in db.trials.items()}
    effects = _decide(deps, *events)
    assert db.trials == before
    assert [(s.run_id, s.reason) for s in effects.stops] == [("r", "ended")]


def test_a_second_run_of_a_started_attempt_is_stopped_after_the_decision() -> None:
    deps, db = _planner(_spec())
    _decide(deps, _started(0, run="first"))
    effects = _decide(deps, _started(0, run="second"))
    assert [(s.trial_id, s.run_id) for s in effects.stops] == [(store.trial_id_for(SID, 0), "second")]
    assert db.trials[store.trial_id_for(SID, 0)]["run_id"] == "first"


@pytest.mark.parametrize("value, pruned", [(0.1, False), (9.0, True)])
def test_median_stopping_judges_progress_against_the_completed_trials(value: float, pruned: bool) -> None:
    spec = _spec(early_stop={"type": "median", "startup_trials": 1, "warmup_steps": 0, "interval_steps": 1,
                             "min_trials": 1}, max_concurrent=1)
    deps, db = _planner(spec)
    for i in range(2):  # two complete, with curves
        _decide(deps, _started(i), TrialProgress(sweep_id=SID, trial_id=store.trial_id_for(SID, i), attempt=1,
                                                 run_id="r", points=[(1, 1.0 + i), (2, 1.0 + i)]), _finished(i, 1.0 + i))
    _decide(deps, _started(2))
    effects = _decide(deps, TrialProgress(sweep_id=SID, trial_id=store.trial_id_for(SID, 2), attempt=1, run_id="r",
                                          points=[(1, value)]))
    t2 = db.trials[store.trial_id_for(SID, 2)]
    assert t2["curve"] == {"1": value}
    assert (t2["state"] == "pruned") is pruned
    assert [s.trial_id for s in effects.stops] == ([store.trial_id_for(SID, 2)] if pruned else [])


def test_pbt_lineage_and_an_exploits_copy_run_over_the_in_memory_adapters() -> None:
    lrs = [0.01, 0.1, 1.0]
    spec = {"name": "m", "command": ["true", "{lr}", "{steps}"], "metric": {"name": "loss", "mode": "min"},
            "space": {"lr": lrs}, "max_concurrent": 2,
            "strategy": {"type": "pbt", "population": 2, "interval": {"param": "steps", "every": 2, "max": 6},
                         "quantile": 0.5, "mutations": {"lr": {"values": lrs}}, "resample_probability": 0.0}}
    deps, db = _planner(spec)
    _decide(deps, _started(0, "r0"), _started(1, "r1"))
    _decide(deps, _finished(0, 1.0, "r0"))  # alone at its interval: it continues
    _decide(deps, _finished(1, 5.0, "r1"))  # the bottom half: it exploits trial 0
    donor, recipient = store.trial_id_for(SID, 0), store.trial_id_for(SID, 1)
    segments = [(s["trial_id"], s["segment"], s["start_step"], s["end_step"], s["value"], s["from_trial_id"])
                for _, s in sorted(db.segments.items())]
    assert segments == [(donor, 1, 0, 2, 1.0, None), (donor, 2, 2, 4, None, None),
                        (recipient, 1, 0, 2, 5.0, None), (recipient, 2, 2, 4, None, donor)]
    assert db.trials[recipient]["state"] == "pending"
    assert copy_pending(deps) == 1  # no artifact store: it goes on from its own checkpoint, with a note
    assert "no artifact store" in db.segments[recipient, 2]["copy_note"] and copy_pending(deps) == 0
