"""Anomaly flags the planner stores: the pure rules, then through the handlers over the in-memory repositories."""

from __future__ import annotations

from spotsweep.services.planner.decide import Decision, TrialUpdate, TrialView, live
from spotsweep.services.planner.flags import preemption_flags
from spotsweep.shared.messages import TrialProgress
from spotsweep.shared.states import TrialState

SPEC = {"name": "fl", "command": ["python", "-c", "pass"], "metric": {"name": "loss"}, "space": {"x": [1]},
        "resources": {"gpus": 0, "class": "cpu"}}


def test_preempted_often_from_three_preemptions() -> None:
    assert preemption_flags(None, 2) is None
    assert preemption_flags(("skipped_lines",), 2) == ("skipped_lines",)
    assert preemption_flags(None, 3) == ("preempted_often",)
    assert preemption_flags(("preempted_often", "nan"), 4) == ("preempted_often", "nan")


def test_live_flags_raise_known_names_only_and_keep_the_decision() -> None:
    view = TrialView(TrialState.RUNNING, 1, run_id="r")
    assert live(view, [], Decision()) == Decision()
    assert live(view, ["<script>", "x" * 999], Decision()) == Decision()  # the body is untrusted
    d = live(view, ["nan", "stalled", "nan"], Decision())
    assert d.update is not None and d.update.flags == ("nan", "stalled") and d.update.state == TrialState.RUNNING
    pruned = Decision(update=TrialUpdate(TrialState.PRUNED, 1, 0, 0, flags=("skipped_lines",)), reason="r")
    d = live(view, ["diverging"], pruned)
    assert d.update is not None and d.update.state == TrialState.PRUNED and d.reason == "r"
    assert d.update.flags == ("skipped_lines", "diverging")


def test_flags_of_a_running_trial_are_stored_at_once_and_redelivery_changes_nothing(h) -> None:  # type: ignore[no-untyped-def]
    h.submit(SPEC, "fl-000000f1")
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    flagged = TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, run_id="r1", points=[],
                            flags=["stalled"])
    assert h.event(flagged).settled == "ack"
    row = h.trial(msg.trial_id)
    assert row["state"] == "running" and row["flags"] == ["stalled"]
    h.event(flagged, redelivered=True)
    h.event(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, run_id="r1", points=[],
                          flags=["nan"]))
    assert h.trial(msg.trial_id)["flags"] == ["stalled", "nan"]
    # another run's flags are fenced off like its points
    h.event(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=1, run_id="other", points=[],
                          flags=["idle_gpu"]))
    h.finish(msg, run_id="r1", flags=["nan", "skipped_lines"])
    row = h.trial(msg.trial_id)
    assert row["state"] == "completed" and row["flags"] == ["stalled", "nan", "skipped_lines"]


def test_the_third_preemption_flags_the_trial_preempted_often(h) -> None:  # type: ignore[no-untyped-def]
    h.submit(SPEC, "fl-000000f2")
    msg = h.published(1)[0]
    for n in range(1, 4):
        h.start(msg, run_id=f"r{n}")
        h.finish(msg, "preempted", run_id=f"r{n}")
        assert h.trial(msg.trial_id)["flags"] == ([] if n < 3 else ["preempted_often"])
        msg = h.published(1)[0]
        assert msg.attempt == n + 1
    h.start(msg, run_id="r4")
    h.finish(msg, run_id="r4")
    row = h.trial(msg.trial_id)
    assert row["state"] == "completed" and row["preemptions"] == 3 and row["flags"] == ["preempted_often"]


def test_a_healthy_trial_has_no_flags(h) -> None:  # type: ignore[no-untyped-def]
    h.submit(SPEC, "fl-000000f3")
    msg = h.published(1)[0]
    h.start(msg, run_id="r1")
    h.finish(msg, run_id="r1", metrics={"loss": 0.5})
    assert h.trial(msg.trial_id)["flags"] == []
