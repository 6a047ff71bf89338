"""The sweep commands (submit, cancel, extend) over the in-memory repositories: what each
writes and the effects it returns to be sent after the commit, with no PostgreSQL
(end to end over PostgreSQL and a broker: test_sweep_commands.py, test_planner_handlers.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

from spotsweep.services.planner import commands, store
from spotsweep.services.planner.bodies import Submission
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.memory import MemoryDb, memory_unit
from spotsweep.services.planner.policy import Policy
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.messages import CancelSweep, ExtendSweep
from spotsweep.shared.states import TrialState

SID = "cmd-000000a0"
SPEC: dict[str, Any] = {
    "name": "grid", "command": ["python", "train.py", "--lr", "{lr}"], "metric": {"name": "loss", "mode": "min"},
    "space": {"lr": [0.001, 0.01, 0.1, 1.0, 10.0]}, "strategy": {"type": "grid", "max_trials": 3}, "max_concurrent": 2,
    "resources": {"gpus": 0, "class": "cpu"},
}


def _planner(policy: Policy | None = None) -> tuple[PlannerDeps, MemoryDb]:
    db = MemoryDb()
    deps = PlannerDeps(db=None, broker=MemoryBroker(), units=partial(memory_unit, db),  # type: ignore[arg-type]
                       policy=policy or Policy())
    return deps, db


def _submit(deps: PlannerDeps, spec: dict[str, Any] = SPEC, sweep_id: str = SID) -> Any:
    return commands.submit(deps, Submission(sweep_id, spec, spec.get("name")))


def _states(db: MemoryDb) -> list[str]:
    return [t["state"] for t in sorted(db.trials.values(), key=lambda t: t["idx"])]


def test_a_submission_writes_max_concurrent_trials_to_the_outbox_once() -> None:
    deps, db = _planner()
    effects = _submit(deps)
    sweep = db.sweeps[SID]
    assert (sweep["state"], sweep["total_trials"], sweep["next_index"]) == ("running", 3, 2)
    assert [t["params"] for t in sorted(db.trials.values(), key=lambda t: t["idx"])] == [{"lr": 0.001}, {"lr": 0.01}]
    assert _states(db) == ["pending", "pending"]
    assert (effects.publish, effects.cancel) == (True, False)
    again = _submit(deps)  # redelivered: nothing new, and the outbox is still drained
    assert len(db.trials) == 2 and db.sweeps[SID]["next_index"] == 2 and again.publish


def test_an_invalid_spec_is_recorded_as_rejected_naming_the_field() -> None:
    deps, db = _planner()
    effects = _submit(deps, {**SPEC, "space": {"lr": {"type": "uniform", "low": 1.0, "high": 0.5}}})
    sweep = db.sweeps[SID]
    assert sweep["state"] == "rejected" and "space.lr.low" in sweep["error"] and sweep["name"] == "grid"
    assert db.trials == {} and not effects.publish


def test_a_command_outside_the_policy_is_rejected_naming_it() -> None:
    deps, db = _planner(Policy.of(None, "python train.py*"))
    _submit(deps, {**SPEC, "command": ["python", "-c", "print('{lr}')"]})
    error = db.sweeps[SID]["error"]
    assert db.sweeps[SID]["state"] == "rejected" and "python -c" in error and "python train.py*" in error
    assert db.trials == {}


def test_a_cancel_ends_the_sweep_and_its_trials_and_tells_every_agent() -> None:
    deps, db = _planner()
    _submit(deps)
    effects = commands.cancel(deps, CancelSweep(sweep_id=SID))
    assert db.sweeps[SID]["state"] == "cancelled" and _states(db) == ["cancelled", "cancelled"]
    assert (effects.cancel, effects.publish) == (True, False)
    assert commands.cancel(deps, CancelSweep(sweep_id=SID)).cancel  # again: still said to the agents


def test_a_cancel_that_overtakes_its_spec_still_cancels_the_sweep() -> None:
    deps, db = _planner()
    early = commands.cancel(deps, CancelSweep(sweep_id=SID))
    assert not early.cancel and SID not in db.sweeps  # nothing to tell, no row: kept for the submission
    _submit(deps)
    assert (db.sweeps[SID]["state"], db.sweeps[SID]["name"]) == ("cancelled", "grid")
    assert db.trials == {} and db.early_cancels == {}


def test_an_extension_of_a_completed_sweep_runs_it_again_once() -> None:
    deps, db = _planner()
    _submit(deps)
    db.sweeps[SID].update(state="completed")
    for t in db.trials.values():
        t["state"] = TrialState.COMPLETED.value
    effects = commands.extend(deps, ExtendSweep(sweep_id=SID, version=0, trials=2))
    sweep = db.sweeps[SID]
    assert (sweep["state"], sweep["spec_version"], sweep["total_trials"]) == ("running", 1, 5)
    assert effects.publish and len(db.trials) == 4 and _states(db)[2:] == ["pending", "pending"]
    commands.extend(deps, ExtendSweep(sweep_id=SID, version=0, trials=2))  # redelivered: version 0 is gone
    assert db.sweeps[SID]["total_trials"] == 5 and len(db.trials) == 4


def test_an_extension_is_refused_for_a_bad_budget_or_a_sweep_that_cannot_run_on() -> None:
    deps, db = _planner()
    _submit(deps)
    refused = commands.extend(deps, ExtendSweep(sweep_id=SID, version=0, budget={"max_hats": 1}))
    assert not refused.publish and db.sweeps[SID]["spec_version"] == 0
    commands.cancel(deps, CancelSweep(sweep_id=SID))
    assert not commands.extend(deps, ExtendSweep(sweep_id=SID, version=0, trials=1)).publish
    assert db.sweeps[SID]["spec_version"] == 0 and db.sweeps[SID]["state"] == "cancelled"
    assert not commands.extend(deps, ExtendSweep(sweep_id="none-000000a0", version=0, trials=1)).publish
    assert store.trial_id_for(SID, 2) not in db.trials
