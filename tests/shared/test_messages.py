"""The wire schema: one envelope, one decode function, one error type."""

import math

import pytest
from pydantic import ValidationError

from spotsweep.shared.errors import DecodeError
from spotsweep.shared.messages import (
    SCHEMA_VERSION, CancelSweep, MetricPoint, TrialFinished, TrialMessage, TrialMetrics, TrialStarted, decode, encode,
    json_schemas, unpack,
)


def test_every_message_round_trips_through_bytes() -> None:
    msgs = [
        TrialMessage(sweep_id="s", trial_id="s.0", attempt=1, trial_name="t", index=0, params={"lr": 0.1},
                     argv=["python", "x.py"], metric="loss"),
        TrialMetrics(sweep_id="s", trial_id="s.0", attempt=2, points=[MetricPoint(step=1, name="loss", value=0.5)]),
        TrialFinished(sweep_id="s", trial_id="s.0", attempt=1, outcome="failed", error="boom", exit_code=1),
        CancelSweep(sweep_id="s"),
    ]
    for m in msgs:
        assert decode(encode(m)) == m


def test_non_finite_metrics_survive_the_wire() -> None:
    m = TrialFinished(sweep_id="s", trial_id="s.0", attempt=1, outcome="failed", metrics={"loss": math.inf})
    assert decode(encode(m)).metrics["loss"] == math.inf  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body, where",
    [
        (b"not json", "body"),
        (b'{"kind": "trial.nope", "sweep_id": "s"}', "trial.nope"),
        (b'{"kind": "trial.finished", "sweep_id": "s", "trial_id": "t", "attempt": 1}', "outcome"),
        (b"[" * 100_000 + b"]" * 100_000, "recursion limit"),
        (b'{"kind": "trial.started", "sweep_id": "s", "trial_id": "t", "attempt": 1, "agent": "a", "x": '
         + b"[" * 100_000 + b"]" * 100_000 + b"}", "recursion limit"),
    ],
)
def test_decode_raises_one_error_type_naming_the_problem(body: bytes, where: str) -> None:
    with pytest.raises(DecodeError, match=where):
        decode(body)


def test_an_unknown_field_is_ignored_so_an_optional_field_can_be_added_without_breaking_older_builds() -> None:
    body = b'{"kind": "trial.started", "sweep_id": "s", "trial_id": "t", "attempt": 1, "agent": "a", "from_the_future": 1}'
    started = decode(body)
    assert isinstance(started, TrialStarted) and started.agent == "a"
    assert "from_the_future" not in started.model_dump()


def test_newer_schema_versions_are_refused() -> None:
    body = encode(CancelSweep(sweep_id="s", schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(DecodeError, match="newer"):
        decode(body)


def test_messages_are_frozen_and_the_schema_is_published() -> None:
    m = CancelSweep(sweep_id="s")
    with pytest.raises(ValidationError):
        m.sweep_id = "other"  # type: ignore[misc]
    schema = json_schemas()
    assert "trial.finished" in str(schema)


def test_metric_points_travel_as_columns_and_the_previous_layout_still_decodes() -> None:
    import math

    m = TrialMetrics(sweep_id="s", trial_id="s.0", attempt=1, steps=[1, 1, 2], names=["loss", "acc", "loss"],
                     values=[0.5, math.nan, math.inf])
    body = encode(m)
    assert b'"steps":[1,1,2]' in body and b'"points"' not in body
    back = decode(body)
    assert isinstance(back, TrialMetrics) and back.steps == [1, 1, 2] and math.isnan(back.values[1])
    assert [(p.step, p.name) for p in back.points] == [(1, "loss"), (1, "acc"), (2, "loss")]
    v2 = (b'{"kind": "trial.metrics", "schema_version": 2, "sweep_id": "s", "trial_id": "s.0", "attempt": 1,'
          b' "points": [{"step": 3, "name": "loss", "value": 0.25}]}')
    old = decode(v2)
    assert isinstance(old, TrialMetrics) and (old.steps, old.names, old.values) == ([3], ["loss"], [0.25])


def test_metric_columns_of_different_lengths_are_refused() -> None:
    import pytest

    from spotsweep.shared.errors import DecodeError

    bad = b'{"kind": "trial.metrics", "sweep_id": "s", "trial_id": "s.0", "attempt": 1, "steps": [1], "names": [], "values": []}'
    with pytest.raises(DecodeError, match="as long as each other"):
        decode(bad)


def test_a_stale_run_can_be_stopped_and_a_lost_run_carries_its_duration() -> None:
    from spotsweep.shared.messages import StopTrial, TrialLost

    stop = StopTrial(sweep_id="s", trial_id="s.0", attempt=1, run_id="r1", reason="stale")
    assert decode(encode(stop)) == stop
    lost = TrialLost(sweep_id="s", trial_id="s.0", attempt=1, agent="a", run_id="r1", reason="connection closed", duration=12.5)
    back = decode(encode(lost))
    assert isinstance(back, TrialLost) and back.duration == 12.5
    # What agents sent before the field existed still decodes, with no duration.
    old = (b'{"kind": "trial.lost", "schema_version": 3, "sweep_id": "s", "trial_id": "s.0", "attempt": 1,'
           b' "agent": "a", "run_id": "r1", "reason": "consumer_timeout"}')
    decoded = decode(old)
    assert isinstance(decoded, TrialLost) and decoded.duration is None


def test_an_end_may_carry_its_own_run_s_start_and_no_other() -> None:
    start = TrialStarted(sweep_id="s", trial_id="s.0", attempt=1, agent="a", run_id="r1", losses=2)
    end = TrialFinished(sweep_id="s", trial_id="s.0", attempt=1, outcome="completed", run_id="r1", started=start)
    assert unpack(decode(encode(end))) == [start, end]
    assert unpack(start) == [start]
    other = start.model_copy(update={"run_id": "r2"})
    body = encode(end).replace(encode(start), encode(other))
    with pytest.raises(DecodeError, match="started: the start of run 'r2'.*same run"):
        decode(body)
