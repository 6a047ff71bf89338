"""ASHA's promotion rule of the paper (Li et al., MLSys 2020) through the
planner's handlers over the in-memory repositories: a trial that ends its run at a
rung waits there (``paused``, no slot held); whenever a slot frees up the
planner promotes a waiting trial in the best floor(n/eta) of the trials its
rung has seen, top rung first, before starting a new config; the promotion
is the same trial relaunched from its checkpoint with the larger budget; the
ones never promoted end pruned, and every bracket still trains one trial to
``max``."""

from __future__ import annotations

from typing import Any

from spotsweep.shared.messages import TrialMessage

SPEC: dict[str, Any] = {
    "name": "paper", "command": ["python", "train.py", "--x", "{x}", "--steps", "{steps}"],
    "metric": {"name": "loss", "mode": "min"}, "resources": {"gpus": 0, "class": "cpu"},
    "space": {"x": [1, 2, 3, 4, 5, 6]}, "max_concurrent": 1,
    "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3, "order": "listed"},
}


def run(h: Any, msg: TrialMessage) -> None:
    h.start(msg, run_id=f"r{msg.trial_id}-{msg.attempt}")
    loss = float(msg.params["x"]) + 1 / int(msg.params["steps"])
    h.finish(msg, "completed", run_id=f"r{msg.trial_id}-{msg.attempt}", metrics={"loss": loss})


def test_a_trial_waits_at_its_rung_and_is_promoted_when_a_slot_frees_and_it_ranks(h: Any) -> None:
    h.submit(SPEC)
    ran: list[tuple[float, int, int]] = []  # (x, steps, attempt) in the order the agent got them
    first = h.published(1)[0]
    run(h, first)
    # Alone at rung 1 (floor(1/3) = 0 promotable): it waits, and the slot goes to a new config.
    assert h.trial(first.trial_id)["state"] == "paused"
    second = h.published(1)[0]
    assert second.params == {"x": 2, "steps": 1}
    run(h, second)
    third = h.published(1)[0]
    assert third.params["x"] == 3
    run(h, third)
    # Three at rung 1: the best of them (x=1, waiting) is promoted before a new config starts.
    promoted = h.published(1)[0]
    assert (promoted.trial_id, promoted.attempt, promoted.params["steps"]) == (first.trial_id, 2, 3)
    assert promoted.argv[-1] == "3"  # resumed from its checkpoint, to step 3
    ran += [(m.params["x"], m.params["steps"], m.attempt) for m in (first, second, third, promoted)]
    msg = promoted
    while True:
        run(h, msg)
        more = h.published(1, timeout=0.5)
        if not more:
            break
        msg = more[0]
        ran.append((msg.params["x"], msg.params["steps"], msg.attempt))
    assert h.sweep("sw1-000000a0")["state"] == "completed"
    rows = {r: h.trial(r) for r in h.states("sw1-000000a0")}
    by_x = {row["params"]["x"]: row for row in rows.values()}
    # 6 at rung 1 -> the best 2 go to rung 3 -> fewer than 3 there, so at the end its best still goes to 9.
    assert by_x[1]["state"] == "completed" and by_x[1]["params"]["steps"] == 9 and by_x[1]["rungs"] == {"1": 2.0, "3": 1 + 1 / 3}
    assert by_x[2]["state"] == "pruned" and by_x[2]["params"]["steps"] == 3
    assert all(by_x[x]["state"] == "pruned" and by_x[x]["params"]["steps"] == 1 for x in (3, 4, 5, 6))
    assert "not promoted past rung 1" in by_x[6]["error"]
    # Steps trained: 6 x 1 + 2 x (3 - 1) + 1 x (9 - 3) = 16, each promotion a new attempt of the same trial.
    assert sum(s - {1: 0, 3: 1, 9: 3}[s] for _, s, _ in ran) == 16
    assert [a for x, s, a in ran if x == 1] == [1, 2, 3]


def test_cancelling_a_sweep_cancels_its_waiting_trials(h: Any) -> None:
    from spotsweep.services.planner.bodies import cancellation
    from spotsweep.services.planner.handlers import handle_sweep_message

    h.submit(SPEC)
    first = h.published(1)[0]
    run(h, first)
    assert h.trial(first.trial_id)["state"] == "paused"
    out = cancellation("sw1-000000a0")
    handle_sweep_message(h.delivery(out.body, out.headers), h.deps)
    assert h.trial(first.trial_id)["state"] == "cancelled"
