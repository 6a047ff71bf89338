"""Untrusted input to the planner, handlers called directly over the in-memory repositories
(over a real PostgreSQL where the database itself refuses a value):
a trial's end is always recorded, and a bad message leaves no row (or a
rejected one, with a bounded reason) and never a crash."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from spotsweep.services.planner import handlers, service
from spotsweep.services.planner.bodies import decoded_body, submission_id
from spotsweep.shared.broker.dispatch import run_handler
from spotsweep.shared.errors import DecodeError
from spotsweep.shared.limits import ERROR_CHARS

SPEC: dict[str, Any] = {
    "name": "untrusted",
    "command": ["python", "train.py", "--x", "{x}"],
    "metric": {"name": "loss"},
    "space": {"x": [1, 2, 3]},
    "max_concurrent": 1,
    "retries": {"max_failures": 1},
    "resources": {"gpus": 0, "class": "cpu"},
}
SID = "untrusted-0000beef"


ON_PG = pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL


def post(h: Any, body: bytes, headers: dict[str, Any] | None = None, message_id: str | None = None) -> Any:
    """Through the planner's guard, as the service runs it: dead-letters what it refuses."""
    d = h.delivery(body, headers or {}, message_id=message_id)
    run_handler(lambda x: handlers.handle_sweep_message(x, h.deps), d)
    return d


# --- a trial's end -------------------------------------------------------------------------------------------------


def test_final_metrics_the_database_cannot_take_are_dropped_and_the_trial_ends(h: Any) -> None:
    h.submit(SPEC, SID)
    msg = h.published(1)[0]
    d = h.finish(msg, metrics={"loss": 0.5, "a\x00b": 1.0, "x" * 10_000: 2.0, "\x1b]0;title\x07": 3.0, "acc": math.inf})
    assert d.settled == "ack"
    row = h.trial(msg.trial_id)
    assert row["state"] == "completed"
    assert row["metrics"] == {"loss": 0.5, "acc": "Infinity"}
    assert "metrics_dropped" in row["flags"]
    assert len(row["warnings"]) == 1 and row["warnings"][0].startswith("3 final metric(s) dropped")
    assert "\x00" not in row["warnings"][0] and "\x1b" not in row["warnings"][0]
    assert h.published(1)[0].index == 1  # its slot is free: the next trial runs


def test_flags_and_warnings_are_kept_over_attempts_once_each(h: Any) -> None:
    h.submit(SPEC, SID)
    first = h.published(1)[0]
    h.finish(first, "failed", failure="exit", error="boom", flags=["skipped_lines"], warnings=["2 lines over 1 MiB skipped"])
    second = h.published(1)[0]
    assert second.attempt == 2
    h.finish(second, flags=["skipped_lines", "log_truncated"], warnings=["2 lines over 1 MiB skipped", "log cut at 64 MiB"])
    row = h.trial(first.trial_id)
    assert row["state"] == "completed"
    assert row["flags"] == ["skipped_lines", "log_truncated"]
    assert row["warnings"] == ["2 lines over 1 MiB skipped", "log cut at 64 MiB"]


def test_errors_and_warnings_are_bounded_and_lose_their_nuls(h: Any) -> None:
    h.submit({**SPEC, "retries": {"max_failures": 0}}, SID)
    msg = h.published(1)[0]
    h.finish(msg, "failed", failure="exit", error="bad\x00" * 1_000_000, agent="ag\x00ent", run_id="r\x00",
             flags=[f"f{i}" for i in range(1000)], warnings=["w" * 100_000] * 3 + [f"w{i}" for i in range(100)])
    row = h.trial(msg.trial_id)
    assert row["state"] == "failed"
    assert len(row["error"]) < ERROR_CHARS + 100 and "\x00" not in row["error"]
    assert len(row["flags"]) <= 32 and len(row["warnings"]) <= 20
    assert all(len(w) <= 1100 for w in row["warnings"])


@ON_PG  # only PostgreSQL refuses the NUL
def test_an_end_the_database_refuses_is_recorded_without_its_values(h: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last resort: should anything the cleaning misses fail the write, the end is still recorded."""
    monkeypatch.setattr(service, "cleaned", lambda event, limits: event)  # the NUL reaches the database
    h.submit(SPEC, SID)
    msg = h.published(1)[0]
    assert h.finish(msg, metrics={"loss": 0.5, "a\x00b": 1.0}).settled == "ack"
    row = h.trial(msg.trial_id)
    assert row["state"] == "completed" and row["metrics"] == {}
    assert row["flags"] == ["values_dropped"] and "database refused" in row["warnings"][0]


# --- messages on spotsweep.sweeps ----------------------------------------------------------------------------------


def test_a_rejected_spec_with_a_markup_name_is_recorded_under_its_id(h: Any) -> None:
    d = post(h, json.dumps({"name": "[/boom]", "command": "nope"}).encode(), {"sweep_id": SID})
    assert d.settled == "ack"
    row = h.sweep(SID)
    assert row is not None and (row["state"], row["name"]) == ("rejected", SID)


@pytest.mark.parametrize("bad_id", ["../../evil/x", "x\x1b[2J-0000beef", "a" * 100_000, "sw1"])
def test_a_sweep_id_header_of_another_shape_is_dead_lettered_and_leaves_no_row(h: Any, bad_id: str) -> None:
    for headers in ({"sweep_id": bad_id}, {"sweep_id": bad_id, "kind": "cancel"}, {"sweep_id": bad_id, "kind": "extend"}):
        assert post(h, json.dumps(SPEC).encode(), headers).settled == "dead-letter"
    assert h.memory.sweeps == {}
    assert h.published(timeout=0.2) == []


def test_a_cancel_of_an_unknown_sweep_leaves_no_sweep_row(h: Any) -> None:
    for i in range(50):
        assert post(h, b"{}", {"kind": "cancel", "sweep_id": f"ghost-{i:08x}"}).settled == "ack"
    assert h.memory.sweeps == {}


def test_a_cancel_of_a_known_sweep_is_idempotent(h: Any) -> None:
    h.submit(SPEC, SID)
    h.published(1)
    for _ in range(2):
        assert post(h, b"{}", {"kind": "cancel", "sweep_id": SID}).settled == "ack"
    assert h.sweep(SID)["state"] == "cancelled"  # type: ignore[index]
    assert set(h.states(SID).values()) == {"cancelled"}


def test_an_uncountable_grid_is_rejected_naming_its_size(h: Any) -> None:
    spec = {**SPEC, "space": {"x": list(range(10)), **{f"p{i}": list(range(10)) for i in range(19)}}}  # 10^20 configs
    assert post(h, json.dumps(spec).encode(), {"sweep_id": SID}).settled == "ack"
    row = h.sweep(SID)
    assert row is not None and row["state"] == "rejected" and "1e+20" in row["error"]


def test_a_deeply_nested_body_is_a_decode_error(h: Any) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert post(h, deep, {"sweep_id": SID}).settled == "dead-letter"
    row = h.sweep(SID)
    assert row is not None and row["state"] == "rejected" and "nested deeper than 64" in row["error"]
    with pytest.raises(DecodeError, match="nested"):
        decoded_body(b'{"a":' * 65 + b"1" + b"}" * 65, "x")
    assert decoded_body(b'{"a":' * 63 + b"1" + b"}" * 63, "x") is not None


def test_a_spec_with_200000_unknown_keys_is_rejected_with_a_bounded_error(h: Any) -> None:
    spec = {**SPEC, **{f"unknown_{i}": i for i in range(200_000)}}
    assert post(h, json.dumps(spec).encode(), {"sweep_id": SID}).settled == "ack"
    row = h.sweep(SID)
    assert row is not None and row["state"] == "rejected"
    assert len(row["error"]) <= ERROR_CHARS + 100 and "more problems" in row["error"]


def test_an_unknown_command_kind_is_dead_lettered(h: Any) -> None:
    assert post(h, json.dumps(SPEC).encode(), {"sweep_id": SID, "kind": "launch-missiles"}).settled == "dead-letter"
    assert h.memory.sweeps == {}


def test_a_message_id_of_another_shape_names_the_sweep_through_a_hash() -> None:
    first = submission_id({}, "../../evil", "grid")
    assert first == submission_id({}, "../../evil", "grid") and first.startswith("grid-")
    assert submission_id({}, "a7c8f7e0-6f7e-4c8e-9d6e-5e2f1b7e9c10", "[/boom]").startswith("rejected-")
    assert submission_id({}, "grid-0123abcd", "grid") == "grid-0123abcd"


@ON_PG  # only PostgreSQL refuses the NUL
def test_a_bad_event_in_a_batch_costs_no_other_trial_its_values(h: Any) -> None:
    from functools import partial

    from spotsweep.shared.broker.batching import BatchingHandler
    from spotsweep.shared.messages import TrialFinished, TrialStarted, encode

    h.submit({**SPEC, "max_concurrent": 2}, SID)
    a, b = h.published(2)
    bad = TrialStarted(sweep_id=SID, trial_id="nope\x00", attempt=1, agent="x")  # the database refuses the NUL
    ends = [TrialFinished(sweep_id=SID, trial_id=m.trial_id, attempt=1, outcome="completed", metrics={"loss": 0.1 * m.index})
            for m in (a, b)]
    deliveries = [h.delivery(encode(e)) for e in (ends[0], bad, ends[1])]
    batcher = BatchingHandler(partial(handlers.handle_events, deps=h.deps), max_batch=3, max_wait=0.01, retry_pause=0.01)
    try:
        for d in deliveries:
            batcher(d)
    finally:
        batcher.close()
    assert [d.settled for d in deliveries] == ["ack", "dead-letter", "ack"]
    assert h.trial(b.trial_id)["metrics"] == {"loss": 0.1} and h.trial(b.trial_id)["flags"] == []
    assert h.trial(a.trial_id)["state"] == "completed"
