"""``budget.max_steps`` through the planner's handlers over the in-memory repositories:
under successive halving with a budget parameter a trial's steps are the
budget it reached (a new trial is charged its first rung, a promotion the
steps it adds); otherwise the highest step it reported, and a new trial is
expected to train as many as the median completed trial. The sweep stops
launching at the cap with the reason as its note. Over PostgreSQL (its SQL
view): ``sweep_results`` counts the steps and the trials waiting at a rung
(``paused``)."""

from __future__ import annotations

from typing import Any

import pytest

from spotsweep.services.planner.extend import extended
from spotsweep.services.planner.bodies import extension
from spotsweep.services.planner.handlers import handle_sweep_message
from spotsweep.shared.errors import SpecError
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.spec import parse_spec

SWEEP = "sw1-000000a0"
BASE: dict[str, Any] = {
    "name": "steps", "command": ["python", "train.py", "--x", "{x}"], "metric": {"name": "loss", "mode": "min"},
    "resources": {"gpus": 0, "class": "cpu"}, "max_concurrent": 1,
}
ASHA: dict[str, Any] = {
    **BASE, "command": [*BASE["command"], "--steps", "{steps}"], "space": {"x": [1, 2, 3, 4, 5, 6]},
    "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3, "order": "listed",
                 "promotion": "async"},
}


def run(h: Any, msg: TrialMessage, loss: float, **kw: Any) -> None:
    h.start(msg, run_id=f"r{msg.trial_id}-{msg.attempt}")
    h.finish(msg, "completed", run_id=f"r{msg.trial_id}-{msg.attempt}", metrics={"loss": loss}, **kw)


ON_PG = pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL: the view


def results(h: Any) -> dict[str, Any]:
    with h.db.transaction() as conn:
        return conn.execute("SELECT * FROM sweep_results WHERE sweep_id = %s", (SWEEP,)).fetchone()


@ON_PG
def test_asha_stops_launching_when_the_next_first_rung_would_pass_max_steps(h: Any) -> None:
    h.submit({**ASHA, "budget": {"max_steps": 12}})
    msg = h.published(1)[0]
    for loss in (0.5, 0.4, 0.3):  # the first trial climbs 1 -> 3 -> 9 steps, resuming each time: 9 steps in all
        run(h, msg, loss)
        msg = h.published(1)[0]
    assert h.trial(f"{SWEEP}.0")["params"]["steps"] == 9 and results(h)["steps"] == 9
    for index in (1, 2, 3):  # each new trial is charged its first rung (1 step): 10, 11, 12; each pruned there
        assert (msg.index, msg.params["steps"]) == (index, 1)
        run(h, msg, 0.9)
        msg = next(iter(h.published(timeout=0.3)), msg)
    assert h.published(timeout=0.3) == []
    sweep = h.sweep(SWEEP)
    assert sweep["state"] == "completed" and sweep["total_trials"] == 4
    assert sweep["note"] == "budget.max_steps: 12 step(s) trained, 13 expected with one more trial, the cap is 12"
    row = results(h)
    assert (row["steps"], row["completed"], row["pruned"], row["paused"]) == (12, 1, 3, 0)


def test_a_promotion_past_max_steps_completes_the_trial_at_its_rung(h: Any) -> None:
    h.submit({**ASHA, "budget": {"max_steps": 5}})
    first = h.published(1)[0]
    run(h, first, 0.5)  # 1 step, then to 3: 3 in all, fits
    again = h.published(1)[0]
    assert (again.trial_id, again.params["steps"]) == (first.trial_id, 3)
    run(h, again, 0.4)  # to 9 would be 6 more: 9 in all
    row = h.trial(first.trial_id)
    assert (row["state"], row["params"]["steps"]) == ("completed", 3)
    assert h.published(timeout=0.3) == []
    sweep = h.sweep(SWEEP)
    assert sweep["state"] == "completed"
    assert sweep["note"] == "budget.max_steps: 3 step(s) trained, 9 expected with the promotion, the cap is 5"
    with h.deps.unit() as uow:  # what the planner counts (the view's count of a trial's steps: the tests over PostgreSQL)
        assert uow.trials.usage(SWEEP, parse_spec(h.sweep(SWEEP)["spec"]), "steps").steps == 3


@ON_PG
def test_without_a_budget_parameter_reported_steps_count_and_the_median_trial_is_expected(h: Any) -> None:
    h.submit({**BASE, "space": {"x": list(range(10))}, "budget": {"max_steps": 250}})
    first = h.published(1)[0]
    h.start(first, run_id="a")
    assert results(h)["steps"] == 0  # nothing reported yet: no estimate, so the first trial launched
    h.finish(first, "completed", run_id="a", metrics={"loss": 0.1}, last_step=100)
    run(h, h.published(1)[0], 0.2, last_step=100)  # 100 trained + 100 expected = 200: fits
    assert h.published(timeout=0.3) == []  # 200 + 100 would pass 250
    sweep = h.sweep(SWEEP)
    assert sweep["state"] == "completed" and sweep["total_trials"] == 2
    assert sweep["note"] == "budget.max_steps: 200 step(s) trained, 300 expected with one more trial, the cap is 250"
    assert results(h)["steps"] == 200


@ON_PG
def test_sweep_results_counts_trials_waiting_at_a_rung(h: Any) -> None:
    h.submit({**ASHA, "strategy": {**ASHA["strategy"], "promotion": "paper"}})
    first = h.published(1)[0]
    run(h, first, 0.5)  # alone at rung 1: it waits there for a promotion
    assert h.trial(first.trial_id)["state"] == "paused"
    second = h.published(1)[0]
    h.start(second, run_id="s")
    row = results(h)
    assert (row["paused"], row["running"], row["trials"], row["steps"]) == (1, 1, 2, 1)  # the waiting trial trained 1


def test_extend_with_a_larger_max_steps_runs_on(h: Any, delivery: Any) -> None:
    h.submit({**BASE, "space": {"x": list(range(10))}, "budget": {"max_steps": 250}})
    for _ in range(2):
        run(h, h.published(1)[0], 0.1, last_step=100)
    assert h.sweep(SWEEP)["state"] == "completed" and h.sweep(SWEEP)["total_trials"] == 2
    cmd = extension(SWEEP, version=0, budget={"max_steps": 400})
    handle_sweep_message(delivery(cmd.body, cmd.headers), h.deps)
    run(h, h.published(1)[0], 0.1, last_step=100)  # 200 + 100, then 300 + 100: two more fit
    run(h, h.published(1)[0], 0.1, last_step=100)
    assert h.published(timeout=0.3) == []
    sweep = h.sweep(SWEEP)
    assert sweep["state"] == "completed" and sweep["total_trials"] == 4 and "the cap is 400" in sweep["note"]


def test_extend_names_a_bad_max_steps() -> None:
    spec = parse_spec({**BASE, "space": {"x": [1, 2]}, "budget": {"max_steps": 10}})
    grown = extended(spec, budget={"max_steps": 20}).budget
    assert grown is not None and grown.max_steps == 20
    with pytest.raises(SpecError) as info:
        extended(spec, budget={"max_steps": 0})
    assert info.value.errors == [("budget.max_steps", "must be a positive integer (got 0)")]


def test_a_pbt_trial_in_flight_counts_what_it_trained_across_exploits_ahead_and_behind() -> None:
    """Trained 0-2, exploited a donor ahead at 4 (steps 2-4 copied, not trained), trained
    4-6, then exploited a donor behind at 4 and runs to 8: 4 trained so far, 4 to go
    (4-6 again, then 6-8)."""
    from spotsweep.services.planner.searching import Flying, Totals, usage_of

    spec = parse_spec({**BASE, "command": [*BASE["command"], "--steps", "{steps}"], "space": {"x": [1, 2]},
                       "budget": {"max_steps": 100},
                       "strategy": {"type": "pbt", "population": 2, "interval": {"param": "steps", "every": 2, "max": 8},
                                    "quantile": 0.5, "mutations": {"x": {"values": [1, 2]}}}})
    flying = Flying("t", 0.0, {2: 5.0, 6: 3.0}, 8.0, 0.0, 0.0, exploits=[(2.0, 2.0), (6.0, -2.0)])
    used = usage_of(spec, "steps", None, Totals(1, 0.0, [], [], 0.0), [flying])
    assert (used.steps, used.committed_steps) == (4.0, 4.0)
    ended = usage_of(spec, "steps", ("t", 1.0), Totals(1, 0.0, [], [], 0.0), [flying])
    assert ended.steps == 8.0 - 2.0 + 2.0  # its budget, less what it copied, plus what it trained again
