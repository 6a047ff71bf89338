"""Runs from journal rows and their slot lanes, with plain values."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from spotsweep.services.reporter.web.seeds import mean_curve
from spotsweep.services.reporter.web.timeline import lanes, runs

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def ev(kind: str, trial: str, at: float, agent: str = "a", run: str = "r", attempt: int = 1, **more: Any) -> dict[str, Any]:
    return {"kind": kind, "trial_id": trial, "trial_name": "n" + trial, "attempt": attempt, "run_id": run, "agent": agent,
            "time": T0 + timedelta(seconds=at), "outcome": more.get("outcome"), "duration": more.get("duration"),
            "redelivered": more.get("redelivered", False), "trial_state": more.get("state", "running"),
            "trial_finished": more.get("finished")}


def test_a_start_and_its_end_make_one_run_and_the_first_end_counts() -> None:
    rows = [ev("trial.finished", "1", 10, outcome="preempted"), ev("trial.started", "1", 0),
            ev("trial.finished", "1", 12, outcome="completed"), ev("trial.lost", "2", 5, run="x", duration=5.0),
            ev("trial.started", "3", 1)]
    [one, two, three] = runs(rows)
    assert (one.trial_id, one.outcome, one.end) == ("1", "preempted", T0 + timedelta(seconds=10))
    assert (two.trial_id, two.outcome, two.start) == ("2", "lost", T0)  # no start journalled: duration before the end
    assert (three.outcome, three.end) == ("running", None)


def test_a_run_whose_agent_vanished_ends_lost_when_the_broker_redelivers_its_attempt() -> None:
    rows = [ev("trial.started", "1", 0, agent="vm-1", run="a"),
            ev("trial.started", "1", 40, agent="vm-2", run="b", redelivered=True),
            ev("trial.finished", "1", 90, agent="vm-2", run="b", outcome="completed", state="completed"),
            ev("trial.started", "2", 5, run="c"), ev("trial.started", "2", 9, run="d"),  # a duplicate: the first goes on
            ev("trial.started", "3", 5, agent="vm-3", run="e", state="cancelled", finished=T0 + timedelta(seconds=70))]
    by_run = {r.run_id: r for r in runs(rows)}
    assert (by_run["a"].outcome, by_run["a"].end, by_run["a"].note) == ("lost", T0 + timedelta(seconds=40),
                                                                         "lost: agent vm-1 vanished")
    assert (by_run["b"].outcome, by_run["c"].outcome, by_run["d"].outcome) == ("completed", "running", "running")
    assert (by_run["e"].outcome, by_run["e"].end) == ("lost", T0 + timedelta(seconds=70))  # the trial ended without it


def test_an_agents_runs_take_the_first_free_lane() -> None:
    rows = [ev("trial.started", "1", 0), ev("trial.finished", "1", 10, outcome="completed"),
            ev("trial.started", "2", 5), ev("trial.finished", "2", 20, outcome="completed"),
            ev("trial.started", "3", 10), ev("trial.finished", "3", 15, outcome="failed"),
            ev("trial.started", "4", 12, agent="b"),
            ev("trial.started", "5", 16)]
    items = runs(rows)
    placed = {r.trial_id: (r.agent, lane) for r, lane in zip(items, lanes(items, T0 + timedelta(seconds=30)))}
    assert placed == {"1": ("a", 0), "2": ("a", 1), "3": ("a", 0), "4": ("b", 0), "5": ("a", 0)}


def test_the_mean_curve_over_seeds_skips_non_finite_values_and_counts_seeds() -> None:
    curve = mean_curve([[(0, 1.0), (1, 2.0)], [(0, 3.0), (1, math.nan)], [(0, 2.0)]], 10)
    assert curve[0] == [0, 2.0, 1.0, 3.0, 3] and curve[1] == [1, 2.0, 2.0, 2.0, 1]
    assert len(mean_curve([[(s, float(s % 7)) for s in range(1000)]], 50)) == 50


def test_a_run_early_stopping_stopped_ends_pruned_not_lost() -> None:
    """The agent sends no end for a run the planner stopped: a pruned trial's last run ended with it, pruned."""
    done = T0 + timedelta(seconds=30)
    rows = [ev("trial.started", "1", 0, run="a", state="pruned", finished=done),
            ev("trial.started", "2", 0, run="b", state="pruned", finished=done),  # lost, then redelivered and pruned
            ev("trial.started", "2", 10, run="c", redelivered=True, state="pruned", finished=done),
            ev("trial.started", "3", 0, run="d", state="completed", finished=done)]  # completed without this run's end
    by_run = {r.run_id: r for r in runs(rows)}
    assert (by_run["a"].outcome, by_run["a"].end, by_run["a"].note) == ("pruned", done, "pruned: early stopping stopped the run")
    assert (by_run["b"].outcome, by_run["c"].outcome, by_run["d"].outcome) == ("lost", "pruned", "lost")
