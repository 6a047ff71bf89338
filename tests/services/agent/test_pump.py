"""The metric pump with plain values: batches by size and age, progress, final metrics."""

from __future__ import annotations

from typing import Any

from spotsweep.services.agent.lines import Points
from spotsweep.services.agent.committer import MetricPump
from spotsweep.shared.messages import TrialMessage, TrialMetrics, TrialProgress


def _msg(progress: bool) -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={}, argv=["x"],
                        metric="loss", progress=progress)


def test_a_full_batch_goes_out_at_once_and_a_partial_one_when_due() -> None:
    sent: list[Any] = []
    pump = MetricPump(_msg(False), "r", sent.append, batch_points=4, batch_seconds=1.0, restored={"old": 1.0})
    pump.take(Points(step=1, values={"loss": 0.5, "acc": 0.1}))
    assert sent == []
    pump.take(Points(step=2, values={"loss": 0.4, "acc": 0.2}))
    assert len(sent) == 1 and isinstance(sent[0], TrialMetrics) and sent[0].steps == [1, 1, 2, 2]
    pump.take(Points(step=3, values={"loss": 0.3}))
    pump.flush_if_due(0.0)  # a monotonic clock far in the past: not due
    assert len(sent) == 1
    pump.flush_if_due(float("inf"))
    assert len(sent) == 2 and sent[1].names == ["loss"]
    assert pump.final == {"old": 1.0, "loss": 0.3, "acc": 0.2} and pump.last_step == 3


def test_the_objective_goes_out_as_progress_when_the_sweep_stops_early() -> None:
    sent: list[Any] = []
    pump = MetricPump(_msg(True), "r", sent.append, batch_points=100, batch_seconds=1.0)
    pump.take(Points(step=1, values={"loss": 0.5, "acc": 0.1}))
    pump.flush()
    pump.flush()  # nothing left: nothing sent
    assert [type(e) for e in sent] == [TrialMetrics, TrialProgress]
    assert sent[1].points == [(1, 0.5)] and sent[1].run_id == "r"
