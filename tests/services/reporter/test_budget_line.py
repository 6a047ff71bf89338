"""The budget line of ``status`` and ``report``: what a sweep spent against each cap its spec sets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spotsweep.services.reporter.budget_line import Spent, budget_line, caps_of, duration, spent_of

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_each_cap_the_spec_sets_shows_what_was_spent() -> None:
    spent = Spent(trials=12, steps=27, gpu_hours=3.1, cost=2.79, elapsed_seconds=3900)
    assert budget_line(caps_of({"max_steps": 40, "max_gpu_hours": 10}), spent) == "budget: 27/40 steps, 3.10/10 GPU-h"
    everything = {"wall_time": "12h", "max_cost": 40, "max_gpu_hours": 12.5, "max_steps": 40, "max_trials": 200}
    assert budget_line(caps_of(everything), spent) == (
        "budget: 12/200 trials, 27/40 steps, 3.10/12.5 GPU-h, 2.79/40 cost, 1h05m/12h wall time")


def test_no_line_without_caps_or_with_a_block_that_does_not_validate() -> None:
    spent = Spent(1, 1, 1.0, None, 1)
    for stored in (None, {}, {"max_steps": -3}, {"max_steps": 10, "nonsense": 1}, "text", [1, 2], {"wall_time": "soon"}):
        assert budget_line(caps_of(stored), spent) is None


def test_spent_is_read_from_a_sweep_results_row() -> None:
    row = {"trials": 4, "steps": 12.0, "gpu_hours": 0.5, "cost": None, "created_at": T0,
           "finished_at": T0 + timedelta(minutes=7)}
    assert spent_of(row, now=T0 + timedelta(hours=5)) == Spent(4, 12.0, 0.5, None, 420.0)
    running = {**row, "finished_at": None}
    assert spent_of(running, now=T0 + timedelta(seconds=30)).elapsed_seconds == 30.0


def test_durations_are_short() -> None:
    assert [duration(s) for s in (45, 720, 725, 7200, 7500, 86400, 97200)] == [
        "45s", "12m", "12m05s", "2h", "2h05m", "1d", "1d3h"]
