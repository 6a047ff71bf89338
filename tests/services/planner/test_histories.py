"""The planner's kept search histories read what a full read of the database reads, as trials change."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import TrialUpdate
from spotsweep.services.planner.histories import HistoryCache
from spotsweep.services.planner.searching import history
from spotsweep.services.planner.unit import unit_of_work
from spotsweep.shared.db import Database
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

SID = "hist-000000a0"
SPEC = parse_spec({"name": "h", "command": ["true"], "metric": {"name": "loss", "mode": "min"},
                   "space": {"x": [1, 2, 3, 4, 5, 6, 7, 8]}, "strategy": {"type": "grid"}})


@pytest.fixture()
def db(database_url: str) -> Any:
    db = Database(database_url)
    db.migrate()
    with db.transaction() as conn:
        store.insert_sweep(conn, SID, SPEC.to_json_dict(), "h", 8, 0)
    yield db
    db.close()


def _launch(db: Database, indexes: list[int]) -> None:
    with db.transaction() as conn:
        store.insert_trials(conn, SID, [(i, f"h_{i}", {"x": i}, {}) for i in indexes], advance=indexes[0] >= 0)


def _end(db: Database, index: int, state: TrialState, curve: dict[int, float]) -> None:
    with db.transaction() as conn:
        trial_id = store.trial_id_for(SID, index)
        store.merge_curve(conn, trial_id, list(curve.items()))
        store.apply_update(conn, trial_id, TrialUpdate(state, 1, 0, 0, metrics={"loss": float(index)}, finished=True))


def _same(db: Database, cache: HistoryCache, **kw: Any) -> None:
    with db.transaction() as conn:
        kept = cache.read(conn, SID, SPEC, **kw)
        full = history(conn, SID, SPEC, **kw)
    assert [r.index for r in kept[0]] == [r.index for r in full[0]]
    assert [r.index for r in kept[1]] == [r.index for r in full[1]]
    for a, b in zip(kept[0] + kept[1], full[0] + full[1]):
        assert (a.state, a.values, a.params, a.rungs) == (b.state, b.values, b.params, b.rungs)
        # with steps, an ended trial may hold the points of earlier reads too: each point asked for is the same
        assert all(_eq(a.curve.get(s), v) for s, v in b.curve.items())
        if not kw.get("steps"):
            assert a.curve.keys() == b.curve.keys()


def _eq(a: float | None, b: float) -> bool:
    return a == b or (a is not None and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("kw", [{}, {"pruned_curves": True}, {"steps": [2]}])
def test_a_kept_history_reads_what_the_database_holds_as_trials_launch_and_end(db: Database, kw: dict[str, Any]) -> None:
    cache = HistoryCache()
    _launch(db, [0, 1, 2])
    _same(db, cache, **kw)
    _end(db, 1, TrialState.COMPLETED, {1: 0.5, 2: 0.4})
    _same(db, cache, **kw)
    _launch(db, [3, 4])
    _launch(db, [-1])  # a smoke trial
    _end(db, 0, TrialState.PRUNED, {1: 0.9, 2: 0.8, 3: float("nan")})
    _end(db, 4, TrialState.FAILED, {})
    _same(db, cache, **kw)
    _end(db, -1, TrialState.COMPLETED, {1: 0.1})
    _same(db, cache, **kw)


def test_new_steps_are_read_for_the_trials_already_ended(db: Database) -> None:
    cache = HistoryCache()
    _launch(db, [0, 1, 2])
    for i in (0, 1):
        _end(db, i, TrialState.COMPLETED, {1: 1.0 + i, 2: 2.0 + i, 3: 3.0 + i})
    _same(db, cache, steps=[1])
    _same(db, cache, steps=[3])
    _same(db, cache, steps=[2, 3], full_curve=store.trial_id_for(SID, 2))


def test_a_failed_unit_of_work_forgets_what_it_read(db: Database) -> None:
    """What a rolled-back transaction read (its own writes included) is not kept."""
    cache = HistoryCache()
    _launch(db, [0, 1])
    with pytest.raises(RuntimeError), unit_of_work(db, cache) as uow:
        uow.stage(store.trial_id_for(SID, 0), TrialUpdate(TrialState.COMPLETED, 1, 0, 0, metrics={"loss": 1.0},
                                                          finished=True))
        regular, _ = uow.history(SID, SPEC)
        assert regular[0].state == TrialState.COMPLETED  # the staged update was written before the read
        raise RuntimeError("rolled back")
    with db.transaction() as conn:
        regular, _ = cache.read(conn, SID, SPEC)
    assert [r.state for r in regular] == [TrialState.PENDING, TrialState.PENDING]
