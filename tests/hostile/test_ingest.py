"""Hostile events published straight to ``spotsweep.events`` (an old agent, a script with the
broker's password) about a real running trial, through the real services.

A 10 MB metric name once stalled the collector for every sweep (the database
refused the index row, and the error was retried for ever); a NUL in a
metric name once left its trial ``running`` for ever (the planner could not
store the final metrics and dead-lettered the end). Now the bad points and
metrics are dropped with a reason, the good ones stored, the trial ends, and
the bystander sweep completes with every point.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from hostile import TERMINAL, Hostile

from spotsweep.shared import topology
from spotsweep.shared.messages import Envelope, TrialFinished, TrialMetrics, encode

pytestmark = pytest.mark.integration

HUGE = "m" * 10_000_000
SLEEPER = "import time\nfrom spotsweep import trial\ntrial.report(0, loss=1.0)\ntime.sleep(30)\n"


def running_trial(hostile: Hostile) -> dict[str, Any]:
    """A sweep with one trial that runs long enough to be lied about; its row once running."""
    sweep_id = hostile.submit({"name": "victim", "command": ["python", "-c", SLEEPER.replace("{", "{{").replace("}", "}}")],
                               "metric": {"name": "loss"}, "space": {"x": [0]}, "resources": {"gpus": 0, "class": "cpu"}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = [r for r in hostile.trials(sweep_id) if r["state"] == "running"]
        if rows:
            [(run_id,)] = hostile.sql("SELECT run_id FROM trials WHERE trial_id = %s", rows[0]["trial_id"])
            return {**rows[0], "run_id": run_id}
        time.sleep(0.2)
    raise AssertionError(f"no trial of {sweep_id} running\n{hostile.cluster.logs()}")


def publish(hostile: Hostile, event: Envelope) -> None:
    kind = event.kind  # type: ignore[attr-defined]
    hostile.post_raw(encode(event), exchange=topology.EVENTS_EXCHANGE,
                     routing_key=topology.event_routing_key(kind, event.sweep_id))


def points(hostile: Hostile, trial_id: str) -> list[tuple[int, str]]:
    return [(int(s), n) for s, n in hostile.sql("SELECT step, left(name, 20) FROM metric_points WHERE trial_id = %s"
                                                  " ORDER BY step, name", trial_id)]


def test_bad_metric_names_are_dropped_and_the_rest_stored(hostile: Hostile) -> None:
    trial = running_trial(hostile)
    tid, sid = trial["trial_id"], trial["sweep_id"]
    publish(hostile, TrialMetrics(sweep_id=sid, trial_id=tid, attempt=1, steps=[100, 100, 100, 101],
                                  names=["good", HUGE, "nul\x00name", "good"], values=[1.0, 2.0, 3.0, 4.0]))
    deadline = time.monotonic() + 30
    while (100, "good") not in points(hostile, tid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {(100, "good"), (101, "good")} <= set(points(hostile, tid))
    assert all(name in ("good", "loss") for _, name in points(hostile, tid))
    assert "points dropped" in (hostile.cluster.tmp / "collector.log").read_text(errors="replace")

    # Its end, with the same poison among its final metrics: recorded, the poison dropped with a reason.
    publish(hostile, TrialFinished(sweep_id=sid, trial_id=tid, attempt=1, run_id=trial["run_id"], outcome="completed",
                                   metrics={"loss": 0.25, HUGE: 1.0, "nul\x00name": 2.0}, message_id=uuid.uuid4().hex))
    assert hostile.wait_sweep(sid, timeout=60) == "completed"
    [row] = hostile.trials(sid)
    assert row["state"] in TERMINAL and row["state"] == "completed"
    assert row["metrics"] == {"loss": 0.25}
    assert "metrics_dropped" in row["flags"] and any("2 final metric(s) dropped" in w for w in row["warnings"])
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()
