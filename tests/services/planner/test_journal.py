"""The planner journals the lifecycle events it decides, in the same transaction, once each."""

from __future__ import annotations

from typing import Any

import pytest

from spotsweep.shared.messages import TrialFinished, TrialLost, TrialProgress, TrialStarted

SPEC: dict[str, Any] = {
    "name": "j",
    "command": ["true"],
    "metric": {"name": "loss", "mode": "min"},
    "space": {"x": [1, 2]},
    "max_concurrent": 2,
    "resources": {"gpus": 0, "class": "cpu"},
}
pytestmark = pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL: its journal table


def journal(h: Any, sweep_id: str) -> list[tuple[str, str, int]]:
    with h.db.transaction() as conn:
        rows = conn.execute("SELECT trial_id, kind, attempt FROM trial_events WHERE sweep_id = %s ORDER BY recorded_at, kind",
                            (sweep_id,)).fetchall()
    return [(r["trial_id"], r["kind"], r["attempt"]) for r in rows]


def test_lifecycle_events_are_journaled_once_even_when_redelivered(h: Any) -> None:
    h.submit(SPEC, "j1-000000a7")
    first, second = h.published(2)
    h.start(first)
    started = h.start(second)
    h.finish(first, metrics={"loss": 0.5})
    lost = TrialLost(sweep_id="j1-000000a7", trial_id=second.trial_id, attempt=second.attempt, agent="a", reason="gone")
    h.event(lost)
    h.event(lost, redelivered=True)  # at-least-once delivery: the same message again
    h.event(TrialProgress(sweep_id="j1-000000a7", trial_id=first.trial_id, attempt=1, run_id="r", points=[(1, 0.5)]))
    kinds = sorted(journal(h, "j1-000000a7"))
    assert kinds == sorted([(first.trial_id, "trial.started", 1), (second.trial_id, "trial.started", 1),
                            (first.trial_id, "trial.finished", 1), (second.trial_id, "trial.lost", 1)])
    assert started.settled == "ack"
    with h.db.transaction() as conn:
        body = conn.execute("SELECT body FROM trial_events WHERE kind = 'trial.finished' AND sweep_id = 'j1-000000a7'").fetchone()["body"]
    assert body["metrics"] == {"loss": 0.5} and body["outcome"] == "completed"


def test_non_finite_metrics_are_journaled_as_the_contract_s_strings(h: Any) -> None:
    """jsonb refuses bare NaN and Infinity: such an event is journaled with
    "NaN", "Infinity" and "-Infinity", as the trial contract writes them."""
    h.submit(SPEC, "j2-000000a8")
    first, _ = h.published(2)
    h.start(first)
    finished = h.finish(first, metrics={"loss": float("nan"), "grad": float("inf"), "lr": float("-inf"), "acc": 0.5})
    assert finished.settled == "ack"
    with h.db.transaction() as conn:
        body = conn.execute("SELECT body FROM trial_events WHERE kind = 'trial.finished' AND sweep_id = 'j2-000000a8'").fetchone()["body"]
    assert body["metrics"] == {"loss": "NaN", "grad": "Infinity", "lr": "-Infinity", "acc": 0.5}


def test_an_end_that_carries_its_start_is_decided_and_journaled_as_both(h: Any) -> None:
    """A run over within one poll sends its start inside its end: the planner
    takes the trial from queued to completed, records when and where it ran,
    and journals two events, once, even when the message comes again."""
    h.submit(SPEC, "j3-000000a9")
    first, second = h.published(2)
    start = TrialStarted(sweep_id="j3-000000a9", trial_id=first.trial_id, attempt=1, agent="a7", run_id="r1")
    end = TrialFinished(sweep_id="j3-000000a9", trial_id=first.trial_id, attempt=1, outcome="completed", agent="a7", run_id="r1",
                        metrics={"loss": 0.25}, started=start)
    assert h.event(end).settled == "ack"
    assert h.event(end, redelivered=True).settled == "ack"
    row = h.trial(first.trial_id)
    assert row["state"] == "completed" and row["started_at"] is not None and row["started_at"] <= row["finished_at"]
    assert row["agent"] == "a7" and row["metrics"] == {"loss": 0.25}
    assert sorted(journal(h, "j3-000000a9")) == [(first.trial_id, "trial.finished", 1), (first.trial_id, "trial.started", 1)]
    # A second run of a trial that runs elsewhere is fenced off, start and end alike.
    h.start(second, run_id="live")
    late = TrialStarted(sweep_id="j3-000000a9", trial_id=second.trial_id, attempt=1, agent="b", run_id="dup")
    h.event(TrialFinished(sweep_id="j3-000000a9", trial_id=second.trial_id, attempt=1, outcome="failed", run_id="dup", started=late))
    assert h.states("j3-000000a9")[second.trial_id] == "running" and h.trial(second.trial_id)["agent"] == "a"
    assert h.told(timeout=0.3) is None  # runs that sent their start with their end are over: nothing to stop
