"""``store.updated`` must agree with what ``store.apply_update`` writes: the
planner decides the second event of a trial in a batch on it, without
reading the row back."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import TrialUpdate, merged
from spotsweep.shared.states import TrialState

from .test_journal import SPEC

pytestmark = pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL: store's SQL

COLUMNS = ("state", "attempt", "failures", "preemptions", "metrics", "run_id", "losses", "agent", "params",
           "run_seconds", "rungs")
UPDATES = [
    TrialUpdate(TrialState.RUNNING, 1, 0, 0, started=True, agent="a1", run_id="r1", losses=2),
    TrialUpdate(TrialState.COMPLETED, 1, 0, 0, metrics={"loss": 0.25, "acc": math.nan}, finished=True, agent="a1",
                add_seconds=1.5, rungs={3: 0.5}),
    TrialUpdate(TrialState.PENDING, 2, 1, 0, error="boom", params={"x": 1, "batch_size": 16}, losses=0,
                add_seconds=0.25),
    TrialUpdate(TrialState.QUEUED, 1, 0, 0, error="lost", add_seconds=2.0),
]


@pytest.mark.parametrize("first", UPDATES, ids=lambda u: u.state.value)
@pytest.mark.parametrize("second", UPDATES, ids=lambda u: u.state.value)
def test_updated_matches_the_row_apply_update_writes(h: Any, first: TrialUpdate, second: TrialUpdate) -> None:
    h.submit(SPEC, "st-000000aa")
    trial_id = h.published(2)[0].trial_id
    with h.db.transaction() as conn:
        row, _ = store.get_trials(conn, [trial_id])[trial_id]
        for u in (first, second):  # twice: merged columns must merge on what the first left
            predicted, view = store.updated(row, u)
            store.apply_update(conn, trial_id, u)
            row, stored_view = store.get_trials(conn, [trial_id])[trial_id]
            assert {c: predicted[c] for c in COLUMNS} == {c: row[c] for c in COLUMNS}
            assert view == stored_view


def test_only_the_queued_mark_skips_the_wait_for_the_disk(h: Any) -> None:
    """The outbox's mark may be lost in a crash (the trial is published again
    and its second run stopped); the transactions that decide must not be."""
    h.submit(SPEC, "sq-000000ab")
    trial_id = h.published(2)[0].trial_id
    with h.db.transaction() as conn:
        store.mark_queued(conn, [trial_id])
        assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "off"
    with h.db.transaction() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"
        assert store.get_trials(conn, [trial_id])[trial_id][0]["state"] == "queued"


@pytest.mark.parametrize("first", UPDATES, ids=lambda u: u.state.value)
@pytest.mark.parametrize("second", UPDATES, ids=lambda u: u.state.value)
def test_a_merged_update_writes_what_the_two_in_order_write(h: Any, first: TrialUpdate, second: TrialUpdate) -> None:
    """A short run's start and end are written with one UPDATE: the row must be
    the one the two UPDATEs in order leave (or the merge must refuse)."""
    h.submit(SPEC, "sm-000000ac")
    one, two = (m.trial_id for m in h.published(2))
    with h.db.transaction() as conn:
        for trial_id in (one, two):  # a history to overwrite or keep: an earlier attempt's error and metrics
            store.apply_update(conn, trial_id, TrialUpdate(TrialState.PENDING, 1, 1, 0, error="old", metrics={"loss": 9.0}))
        both = merged(first, second)
        if both is None:
            assert first.state == TrialState.COMPLETED
            return
        store.apply_update(conn, one, first)
        store.apply_update(conn, one, second)
        store.apply_update(conn, two, both)
        rows = [conn.execute("SELECT * FROM trials WHERE trial_id = %s", (t,)).fetchone() for t in (one, two)]
    skip = {"trial_id", "idx", "trial_name"} | ({"params"} if first.params is None and second.params is None else set())
    assert {k: v for k, v in rows[0].items() if k not in skip} == {k: v for k, v in rows[1].items() if k not in skip}
