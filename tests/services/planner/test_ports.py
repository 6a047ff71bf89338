"""One contract suite over both adapters of the planner's repositories (PostgreSQL and in memory)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import TrialUpdate
from spotsweep.services.planner.lineage import Segment
from spotsweep.services.planner.memory import MemoryDb, MemorySweeps, MemoryTrials
from spotsweep.services.planner.ports import PgSweeps, PgTrials, SweepRepository, TrialRepository
from spotsweep.shared.db import Database
from spotsweep.shared.messages import CheckpointSaved
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

SID = "port-000000a0"
SPEC = parse_spec({"name": "p", "command": ["true"], "metric": {"name": "loss", "mode": "min"},
                   "space": {"x": [1, 2, 3, 4]}, "strategy": {"type": "grid"}})
Repos = tuple[SweepRepository, TrialRepository]


@pytest.fixture(params=["postgres", "memory"])
def repos(request: pytest.FixtureRequest) -> Iterator[Repos]:
    if request.param == "memory":
        db = MemoryDb()
        yield MemorySweeps(db), MemoryTrials(db)
        return
    pg = Database(request.getfixturevalue("database_url"))
    pg.migrate()
    try:
        with pg.transaction() as conn:
            yield PgSweeps(conn), PgTrials(conn)
    finally:
        pg.close()


def _tid(i: int) -> str:
    return store.trial_id_for(SID, i)


def _with_trials(repos: Repos, n: int = 3) -> Repos:
    sweeps, trials = repos
    assert sweeps.insert(SID, SPEC.to_json_dict(), "p", 4, 2)
    trials.insert(SID, [(i, f"p_{i}", {"x": i + 1}, {"k": i}) for i in range(n)])
    return repos


def test_a_sweep_is_inserted_once_and_read_without_its_spec(repos: Repos) -> None:
    sweeps, _ = repos
    assert sweeps.insert(SID, SPEC.to_json_dict(), "p", 4, 2)
    assert not sweeps.insert(SID, {}, "other", 9, 0)
    row = sweeps.lock(SID)
    assert row is not None and "spec" not in row
    assert (row["name"], row["state"], row["total_trials"], row["next_index"], row["priority"], row["has_spec"]) == (
        "p", "running", 4, 0, 2, True)
    assert sweeps.lock("nope-000000a0") is None


def test_a_sweep_is_capped_finished_once_and_keeps_study_attrs(repos: Repos) -> None:
    sweeps, _ = _with_trials(repos)
    sweeps.cap(SID, 3, "budget")
    sweeps.set_study_attrs(SID, {"a": [1, 2]})
    sweeps.finish(SID, "failed", "smoke\x00failed")
    sweeps.finish(SID, "completed")  # an ended sweep stays as it is
    row = sweeps.lock(SID)
    assert row is not None
    assert (row["total_trials"], row["note"], row["search_attrs"], row["state"]) == (3, "budget", {"a": [1, 2]}, "failed")
    assert row["error"] == "smoke\ufffdfailed" and row["finished_at"] is not None


def test_trials_are_inserted_once_pending_and_advance_the_sweep(repos: Repos) -> None:
    sweeps, trials = _with_trials(repos)
    trials.insert(SID, [(0, "again", {"x": 9}, {})], advance=False)  # exists: unchanged
    trials.insert(SID, [(-1, "p_smoke_0", {"x": 1}, {})], advance=False)
    assert sweeps.lock(SID)["next_index"] == 3  # type: ignore[index]
    got = trials.get([_tid(2), _tid(0), "missing", _tid(0)])
    assert list(got) == [_tid(0), _tid(2)]
    row, view = got[_tid(0)]
    assert (row["trial_name"], row["params"], row["idx"], row["attempt"]) == ("p_0", {"x": 1}, 0, 1)
    assert (view.state, view.attempt, view.failures, view.run_id) == (TrialState.PENDING, 1, 0, None)
    assert trials.in_flight(SID) == (4, 4)


def test_updates_write_what_decisions_read(repos: Repos) -> None:
    _, trials = _with_trials(repos)
    trials.update(_tid(0), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True, agent="a", run_id="r1", losses=0))
    trials.update(_tid(0), TrialUpdate(TrialState.PENDING, 2, 1, 0, error="oom", add_seconds=2.5, params={"x": 7},
                                       flags=("f1",), warnings=("w",)))
    trials.update(_tid(0), TrialUpdate(TrialState.RUNNING, 2, 1, 0, started=True, run_id="r2", flags=("f1", "f2")))
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 2, 1, 0, metrics={"loss": 0.5, "acc": math.nan},
                                       finished=True, add_seconds=1.0, rungs={3: 0.5}))
    trials.update(_tid(1), TrialUpdate(TrialState.FAILED, 1, 1, 0, error="boom\x00", finished=True))
    row, view = trials.get([_tid(0)])[_tid(0)]
    assert (view.state, view.attempt, view.failures, view.run_id, view.params) == (
        TrialState.COMPLETED, 2, 1, "r2", {"x": 7})
    assert (row["run_seconds"], row["agent"], row["losses"]) == (3.5, "a", 0)
    assert row["metrics"]["loss"] == 0.5 and row["rungs"] == {"3": 0.5}
    assert trials.in_flight(SID) == (1, 1)
    regular, _ = trials.history(SID, SPEC)
    assert [(r.state, r.error, r.failures, r.values) for r in regular[:2]] == [
        (TrialState.COMPLETED, None, 1, (0.5,)), (TrialState.FAILED, "boom\ufffd", 1, None)]
    assert regular[0].rungs == {3: 0.5} and regular[2].attrs == {"k": 2}


@pytest.mark.parametrize("kw, expected", [
    ({}, [{}, {}, {}]),
    ({"steps": [2]}, [{2: 0.2}, {2: 1.2}, {}]),
    ({"steps": [2], "full_curve": _tid(1)}, [{2: 0.2}, {1: 1.1, 2: 1.2, 3: math.inf}, {}]),
    ({"pruned_curves": True}, [{1: 0.1, 2: 0.2}, {}, {}]),
])
def test_history_holds_the_curve_points_asked_for(repos: Repos, kw: dict[str, Any], expected: list[Any]) -> None:
    _, trials = _with_trials(repos)
    trials.merge_curve(_tid(0), [(1, 0.1), (2, 0.0)])
    trials.merge_curve(_tid(0), [(2, 0.2)])
    trials.merge_curve(_tid(1), [(1, 1.1), (2, 1.2), (3, math.inf)])
    trials.update(_tid(0), TrialUpdate(TrialState.PRUNED, 1, 0, 0, finished=True))
    trials.insert(SID, [(-1, "p_smoke_0", {"x": 1}, {})], advance=False)
    regular, smoke = trials.history(SID, SPEC, **kw)
    assert [r.index for r in regular] == [0, 1, 2] and [r.index for r in smoke] == [0]
    assert [dict(r.curve) for r in regular] == expected


def test_a_failed_sweep_cancels_its_trials_in_flight_and_keeps_its_spec(repos: Repos) -> None:
    sweeps, trials = _with_trials(repos)
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 1, 0, 0, metrics={"loss": 1.0}, finished=True))
    trials.update(_tid(1), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True, run_id="r"))
    sweeps.fail(SID, "smoke failed")
    row = sweeps.lock(SID)
    assert row is not None and (row["state"], row["error"]) == ("failed", "smoke failed")
    regular, _ = trials.history(SID, SPEC)
    assert [(r.state, r.error) for r in regular] == [(TrialState.COMPLETED, None),
                                                    (TrialState.CANCELLED, "the sweep failed: smoke failed"),
                                                    (TrialState.CANCELLED, "the sweep failed: smoke failed")]
    assert trials.in_flight(SID) == (0, 0)
    assert sweeps.spec(SID) == (SPEC.to_json_dict(), 0) and sweeps.spec("nope-000000a0") is None


def test_usage_counts_what_the_ended_trials_used(repos: Repos) -> None:
    _, trials = _with_trials(repos)
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 1, 0, 0, finished=True, add_seconds=10.0))
    trials.update(_tid(1), TrialUpdate(TrialState.FAILED, 1, 1, 0, finished=True, add_seconds=4.0))
    trials.insert(SID, [(-1, "p_smoke_0", {"x": 1}, {})], advance=False)
    used = trials.usage(SID, SPEC)
    assert (used.launched, used.gpu_seconds, used.gpus, used.unit_seconds) == (3, 14.0, 1, None)
    assert used.trial_seconds == pytest.approx(10.0)


def test_usage_counts_training_steps_alike_on_both_adapters(repos: Repos) -> None:
    _, trials = _with_trials(repos, n=4)  # params x = 1..4
    trials.update(_tid(0), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True))
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 1, 0, 0, finished=True, last_step=100))
    trials.update(_tid(1), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True))
    trials.merge_curve(_tid(1), [(10, 0.5), (30, 0.4)])  # progress: 30 steps so far
    trials.update(_tid(2), TrialUpdate(TrialState.CANCELLED, 1, 0, 0, finished=True))  # never started
    trials.update(_tid(3), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True, rungs={2: 0.3}))
    # Reported steps: 100 + 30 + 0 + 0 trained; the median completed trial (100) expected of each run in flight.
    used = trials.usage(SID, SPEC)
    assert (used.steps, used.trial_steps, used.committed_steps) == (130, 100, (100 - 30) + 100)
    # x as a budget parameter: ended trials count their budget, runs in flight their highest rung.
    used = trials.usage(SID, SPEC, budget_param="x")
    assert (used.steps, used.trial_steps, used.committed_steps) == (1 + 0 + 0 + 2, None, 2 + (4 - 2))


def test_outcomes_count_regular_trials_and_name_the_first_error(repos: Repos) -> None:
    sweeps, trials = _with_trials(repos, n=4)
    trials.insert(SID, [(-1, "p_smoke_0", {"x": 1}, {})], advance=False)
    for i, error in reversed(list(enumerate(["oom", "exit 1", "oom"]))):
        trials.update(_tid(i), TrialUpdate(TrialState.FAILED, 1, 1, 0, error=error, finished=True))
    out = trials.outcomes(SID)
    assert out.counts == {"failed": 3, "pending": 1}  # the smoke trial is not counted
    assert out.first_error == "oom"
    assert trials.outcomes("nope-000000a0").counts == {}


def test_a_rejected_sweep_is_recorded_once_without_a_spec(repos: Repos) -> None:
    sweeps, _ = repos
    sweeps.insert_rejected(SID, "p", "bad\x00spec")
    sweeps.insert_rejected(SID, "again", "other")  # exists: unchanged
    assert not sweeps.insert(SID, SPEC.to_json_dict(), "p", 4, 2)
    row = sweeps.lock(SID)
    assert row is not None and (row["name"], row["state"], row["error"], row["has_spec"]) == (
        "p", "rejected", "bad\ufffdspec", False)
    assert row["finished_at"] is not None and sweeps.spec(SID) is None


def test_a_cancel_ends_the_sweep_and_its_trials_not_yet_ended(repos: Repos) -> None:
    sweeps, trials = _with_trials(repos)
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 1, 0, 0, metrics={"loss": 1.0}, finished=True))
    trials.update(_tid(1), TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True, run_id="r"))
    assert sweeps.cancel(SID) == 2
    assert sweeps.cancel(SID) == 0  # again: nothing left to cancel, the sweep stays cancelled
    assert sweeps.cancel("nope-000000a0") is None and sweeps.lock("nope-000000a0") is None
    row = sweeps.lock(SID)
    assert row is not None and row["state"] == "cancelled" and row["finished_at"] is not None
    regular, _ = trials.history(SID, SPEC)
    assert [(r.state, r.error) for r in regular] == [(TrialState.COMPLETED, None),
                                                    (TrialState.CANCELLED, "cancelled by user"),
                                                    (TrialState.CANCELLED, "cancelled by user")]


def test_a_cancel_that_came_first_is_taken_once(repos: Repos) -> None:
    sweeps, _ = repos
    assert not sweeps.take_early_cancel(SID)
    assert sweeps.remember_early_cancel(SID)
    assert not sweeps.remember_early_cancel(SID)  # kept already
    assert sweeps.take_early_cancel(SID)
    assert not sweeps.take_early_cancel(SID)


def _tombstone(sweeps: SweepRepository, sweep_id: str) -> None:
    """A cancelled sweep without a spec, as a planner before schema version 3 left one."""
    if isinstance(sweeps, PgSweeps):
        sweeps.conn.execute("INSERT INTO sweeps (sweep_id, name, state, finished_at) VALUES (%s, %s, 'cancelled', now())",
                            (sweep_id, sweep_id))
    else:
        assert isinstance(sweeps, MemorySweeps) and sweeps.insert(sweep_id, {}, sweep_id, 0, 0)
        sweeps.db.sweeps[sweep_id].update(spec=None, state="cancelled")


def test_a_tombstone_gets_its_spec_and_nothing_else_does(repos: Repos) -> None:
    sweeps, _ = _with_trials(repos)
    sweeps.fill_tombstone(SID, {"other": 1}, "q", 9)  # has a spec: unchanged
    assert sweeps.spec(SID) == (SPEC.to_json_dict(), 0)
    rejected, tomb = "rej-000000a0", "tomb-000000a0"
    sweeps.insert_rejected(rejected, "r", "no spec")
    sweeps.fill_tombstone(rejected, SPEC.to_json_dict(), "r", 4)  # rejected, not cancelled: unchanged
    assert sweeps.spec(rejected) is None
    _tombstone(sweeps, tomb)
    sweeps.fill_tombstone(tomb, SPEC.to_json_dict(), "t", 4)
    row = sweeps.lock(tomb)
    assert row is not None and (row["state"], row["name"], row["total_trials"]) == ("cancelled", "t", 4)
    assert sweeps.spec(tomb) == (SPEC.to_json_dict(), 0)


def test_an_extension_bumps_the_version_and_runs_an_ended_sweep_again(repos: Repos) -> None:
    sweeps, _ = _with_trials(repos)
    sweeps.cap(SID, 3, "budget")
    sweeps.finish(SID)
    bigger = {**SPEC.to_json_dict(), "name": "p2"}
    sweeps.extend(SID, bigger, 8)
    row = sweeps.lock(SID)
    assert row is not None
    assert (row["state"], row["finished_at"], row["note"], row["total_trials"], row["spec_version"]) == (
        "running", None, None, 8, 1)
    assert sweeps.spec(SID) == (bigger, 1)


def _segments(trials: TrialRepository) -> list[dict[str, Any]]:
    """The lineage as stored (the report reads it through the view ``trial_segments``)."""
    if isinstance(trials, PgTrials):
        return trials.conn.execute("SELECT * FROM pbt_segments ORDER BY trial_id, segment").fetchall()
    assert isinstance(trials, MemoryTrials)
    return [row for _, row in sorted(trials.db.segments.items())]


def test_pbt_lineage_is_recorded_once_and_each_exploit_copied_once(repos: Repos) -> None:
    _, trials = _with_trials(repos)
    assert trials.end_segment(_tid(0), SID, 2, {"x": 1}, 0.9) == 1  # the first segment, written as it ends
    assert trials.end_segment(_tid(0), SID, 2, {"x": 1}, 0.5) == 1
    exploit = Segment(_tid(0), 2, SID, 2, 2, 4, {"x": 2}, _tid(1), 2)
    trials.add_segment(exploit)
    trials.add_segment(exploit._replace(end_step=9))  # a redelivered decision: unchanged
    trials.add_segment(Segment(_tid(1), 2, SID, 2, 2, 4, {"x": 2}))  # a continue: nothing to copy
    assert trials.copies_to_do(None) == trials.copies_to_do(SID) == [
        {"trial_id": _tid(0), "segment": 2, "sweep_id": SID, "from_trial_id": _tid(1), "keep_all": False}]
    assert trials.copies_to_do("nope-000000a0") == []
    trials.mark_copied(_tid(0), 2, None, "no checkpoint")
    trials.mark_copied(_tid(0), 2, 2, None)  # done already: unchanged
    assert trials.copies_to_do(None) == []
    got = [(s["trial_id"], s["segment"], s["attempt"], s["end_step"], s["params"], s["value"], s["from_trial_id"],
            s["from_step"], s["copy_note"], s["copied_at"] is not None) for s in _segments(trials)]
    assert got == [(_tid(0), 1, 1, 2, {"x": 1}, 0.5, None, None, None, False),
                   (_tid(0), 2, 2, 4, {"x": 2}, None, _tid(1), None, "no checkpoint", True),
                   (_tid(1), 2, 2, 4, {"x": 2}, None, None, None, None, False)]


def test_a_copy_waits_only_while_its_trial_is_pending(repos: Repos) -> None:
    _, trials = _with_trials(repos)
    trials.add_segment(Segment(_tid(0), 2, SID, 2, 2, 4, {"x": 2}, _tid(1), 2))
    trials.update(_tid(0), TrialUpdate(TrialState.CANCELLED, 2, 0, 0, finished=True))
    assert trials.copies_to_do(SID) == []


def test_the_outbox_is_the_pending_trials_but_those_awaiting_a_copy(repos: Repos) -> None:
    _, trials = _with_trials(repos)
    trials.add_segment(Segment(_tid(1), 2, SID, 2, 2, 4, {"x": 2}, _tid(0), 2))  # an exploit not copied yet
    trials.update(_tid(2), TrialUpdate(TrialState.RUNNING, 1, 0, 0))
    assert [(r["trial_id"], r["spec_version"], r["params"]) for r in trials.pending(SID)] == [(_tid(0), 0, {"x": 1})]
    assert trials.pending("nope-000000a0") == [] and len(trials.pending(None)) == 1
    trials.mark_queued([_tid(0), _tid(2)])  # a trial no longer pending stays as it is
    assert trials.pending(None) == []
    assert [trials.get([_tid(i)])[_tid(i)][1].state for i in (0, 2)] == [TrialState.QUEUED, TrialState.RUNNING]
    trials.mark_copied(_tid(1), 2, 2, None)
    assert [r["trial_id"] for r in trials.pending(SID)] == [_tid(1)]


def test_each_trials_newest_journaled_checkpoint(repos: Repos) -> None:
    _, trials = _with_trials(repos)

    def saved(i: int, step: int, uri: str) -> CheckpointSaved:
        return CheckpointSaved(sweep_id=SID, trial_id=_tid(i), attempt=1, step=step, uri=uri)

    trials.journal([saved(0, 10, "s3://b/ten"), saved(0, 20, "s3://b/twenty"), saved(0, 15, "s3://b/fifteen"),
                    saved(1, 5, "s3://b/five")], {})
    assert trials.newest_checkpoints([_tid(0), _tid(2)]) == [{"trial_id": _tid(0), "sweep_id": SID, "uri": "s3://b/twenty"}]


def test_usage_does_not_count_the_steps_a_pbt_exploit_copied(repos: Repos) -> None:
    sweeps, trials = repos
    pbt = parse_spec({"name": "p", "command": ["true"], "metric": {"name": "loss"}, "space": {"lr": [0.1, 1.0]},
                      "strategy": {"type": "pbt", "population": 2, "interval": {"param": "steps", "every": 2, "max": 6},
                                   "mutations": {"lr": {"values": [0.1, 1.0]}}}})
    assert sweeps.insert(SID, pbt.to_json_dict(), "p", 2, 0)
    trials.insert(SID, [(i, f"p_{i}", {"lr": 0.1, "steps": 4}, {}) for i in range(2)])
    for i, from_step in ((0, 3), (1, 5)):  # each exploited a donor at step 2
        trials.add_segment(Segment(_tid(i), 2, SID, 2, 2, 4, {"lr": 1.0, "steps": 4}, _tid(1 - i), from_step))
        trials.update(_tid(i), TrialUpdate(TrialState.RUNNING, 2, 0, 0, started=True, rungs={2: 0.5}))
    trials.update(_tid(0), TrialUpdate(TrialState.COMPLETED, 2, 0, 0, finished=True))
    # Trial 0 ended at 4 having copied 1 step; trial 1 runs from the donor's 5 (3 copied) and has trained to 2.
    assert trials.usage(SID, pbt, budget_param="steps").steps == (4 - 1) + 2
