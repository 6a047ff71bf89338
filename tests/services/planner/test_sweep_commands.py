"""The commands on ``spotsweep.sweeps`` are typed messages; untyped bodies of older clients still work.

Pure decoding first (services/planner/bodies.sweep_command), then the
planner over the in-memory repositories (the CLI's messages, an older CLI's),
then a bad command through the real RabbitMQ dispatcher to a planner over
PostgreSQL: dead-lettered with its reason in a header.
"""

from __future__ import annotations

import json
import queue
import threading
from functools import partial
from typing import Any

import pytest

from spotsweep.services.planner.bodies import Submission, UndecodableSubmission, sweep_command
from spotsweep.services.planner.bodies import cancellation, extension, submission
from spotsweep.services.planner.handlers import handle_sweep_message
from spotsweep.shared import topology
from spotsweep.shared.broker.dispatch import REASON_HEADER
from spotsweep.shared.broker.port import Delivery, Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.errors import DecodeError
from spotsweep.shared.messages import SCHEMA_VERSION, CancelSweep, ExtendSweep
from spotsweep.shared.spec import parse_spec

SPEC: dict[str, Any] = {
    "name": "cmds",
    "command": ["python", "train.py", "--x", "{x}"],
    "metric": {"name": "loss"},
    "space": {"x": [1, 2, 3]},
    "max_concurrent": 1,
    "resources": {"gpus": 0, "class": "cpu"},
}
SID = "cmds-0000beef"


def read(out: Outgoing) -> Any:
    return sweep_command(out.headers, out.message_id, out.body)


# -- decoding, pure ---------------------------------------------------------------


def test_the_cli_messages_are_typed_and_read_back() -> None:
    spec = parse_spec(SPEC)
    sub = read(submission(spec, SID))
    assert isinstance(sub, Submission) and sub.sweep_id == SID and sub.spec == spec.to_json_dict()
    assert json.loads(submission(spec, SID).body)["kind"] == "sweep.submit"
    cancel = read(cancellation(SID))
    assert isinstance(cancel, CancelSweep) and cancel.sweep_id == SID
    ext = read(extension(SID, version=2, trials=5, budget={"max_trials": 9}))
    assert isinstance(ext, ExtendSweep) and (ext.sweep_id, ext.version, ext.trials, ext.budget) == (SID, 2, 5, {"max_trials": 9})


def test_untyped_bodies_of_an_older_cli_are_still_read() -> None:
    sub = sweep_command({"sweep_id": SID}, SID, json.dumps(SPEC).encode())
    assert isinstance(sub, Submission) and (sub.sweep_id, sub.spec, sub.name) == (SID, SPEC, "cmds")
    cancel = sweep_command({"kind": "cancel", "sweep_id": SID}, None, b"{}")
    assert isinstance(cancel, CancelSweep) and cancel.sweep_id == SID
    ext = sweep_command({"kind": "extend", "sweep_id": SID}, None, b'{"trials": 3, "budget": {}, "version": 1}')
    assert isinstance(ext, ExtendSweep) and (ext.trials, ext.version) == (3, 1)


def test_unknown_fields_are_ignored_so_adding_an_optional_one_is_not_breaking() -> None:
    body = {"kind": "sweep.cancel", "sweep_id": SID, "schema_version": SCHEMA_VERSION, "reason_v9": "later field"}
    assert isinstance(sweep_command({}, None, json.dumps(body).encode()), CancelSweep)


@pytest.mark.parametrize(("body", "says"), [
    ({"kind": "sweep.extend", "sweep_id": SID, "trials": 2}, "version"),  # missing: a clear field name
    ({"kind": "sweep.cancel", "sweep_id": "../../evil"}, "is not a sweep id"),
    ({"kind": "sweep.cancel", "sweep_id": SID, "schema_version": SCHEMA_VERSION + 1}, "newer than this build"),
])
def test_a_bad_typed_command_is_a_decode_error_naming_why(body: dict[str, Any], says: str) -> None:
    with pytest.raises(DecodeError, match=says.replace(".", r"\.")):
        sweep_command({}, None, json.dumps(body).encode())


def test_a_typed_submission_that_cannot_be_read_is_rejected_under_the_id_it_named() -> None:
    with pytest.raises(UndecodableSubmission) as info:
        sweep_command({"sweep_id": SID}, SID, json.dumps({"kind": "sweep.submit", "sweep_id": SID}).encode())
    assert info.value.sweep_id == SID and "spec" in str(info.value)


# -- the planner in memory -------------------------------------------------------------


def deliver(h: Any, out: Outgoing) -> Any:
    d = h.delivery(out.body, dict(out.headers), message_id=out.message_id)
    handle_sweep_message(d, h.deps)
    return d


def test_the_planner_runs_the_typed_commands(h: Any) -> None:
    assert deliver(h, submission(parse_spec(SPEC), SID)).settled == "ack"
    assert len(h.published(1)) == 1 and h.sweep(SID)["state"] == "running"
    assert deliver(h, cancellation(SID)).settled == "ack"
    assert h.sweep(SID)["state"] == "cancelled"


def test_the_planner_still_runs_an_older_clis_cancel(h: Any) -> None:
    h.submit(SPEC, SID)  # an untyped spec body
    d = h.delivery(b"{}", {"kind": "cancel", "sweep_id": SID})
    handle_sweep_message(d, h.deps)
    assert d.settled == "ack" and h.sweep(SID)["state"] == "cancelled"


# -- through RabbitMQ and the dispatcher ------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("h", ["postgres"], indirect=True)  # conftest.h over PostgreSQL: the service's wiring
def test_a_bad_command_is_dead_lettered_with_its_reason(h: Any, rabbit_url: str) -> None:
    broker = RabbitBroker(rabbit_url)
    thread = threading.Thread(target=broker.run, daemon=True)
    thread.start()
    try:
        broker.declare(topology.service_queues(("cpu",)))
        dead: queue.Queue[Delivery] = queue.Queue()
        broker.consume(topology.DEAD_LETTER_QUEUE, lambda d: (d.ack(), dead.put(d)))
        broker.consume(topology.SWEEPS_QUEUE, partial(handle_sweep_message, deps=h.deps))
        bad = json.dumps({"kind": "sweep.extend", "sweep_id": SID, "trials": 2}).encode()
        broker.publish(Outgoing("", topology.SWEEPS_QUEUE, bad))
        d = dead.get(timeout=20)
        assert d.body == bad and "version" in d.headers[REASON_HEADER]
        assert d.headers["x-spotsweep-queue"] == topology.SWEEPS_QUEUE
    finally:
        broker.stop(drain=False)
        thread.join(10)


def test_a_trial_message_from_a_newer_planner_still_decodes() -> None:
    """An agent on an old image reads a trial message with fields (and a limit) it does not know."""
    from spotsweep.shared.messages import TrialMessage, decode, encode

    msg = TrialMessage(sweep_id=SID, trial_id="t1", attempt=0, trial_name="t", index=0, params={}, argv=["x"],
                       metric="loss")
    wire = json.loads(encode(msg))
    wire["new_field"] = {"anything": 1}
    wire["limits"]["new_limit"] = 5
    back = decode(json.dumps(wire).encode())
    assert isinstance(back, TrialMessage) and back.limits == msg.limits


def test_spotsweep_schema_shows_the_sweep_commands() -> None:
    from spotsweep.shared.messages import json_schemas

    text = json.dumps(json_schemas())
    assert all(kind in text for kind in ("sweep.submit", "sweep.cancel", "sweep.extend", "trial.finished"))


def test_cancel_and_extend_stay_readable_by_a_planner_from_before_the_typed_commands() -> None:
    """It read the header ``kind`` and an extend's ``trials``/``budget``/``version`` keys."""
    cancel = cancellation(SID)
    assert cancel.headers == {"kind": "cancel", "sweep_id": SID}
    ext = extension(SID, version=3, trials=4, budget={"max_trials": 9})
    body = json.loads(ext.body)
    assert ext.headers == {"kind": "extend", "sweep_id": SID}
    assert (body["trials"], body["budget"], body["version"]) == (4, {"max_trials": 9}, 3)


def test_a_typed_body_must_agree_with_the_kind_header() -> None:
    other = json.loads(cancellation("other-0000cafe").body)
    with pytest.raises(DecodeError, match="its body is a sweep.cancel of other-0000cafe"):
        sweep_command({"kind": "cancel", "sweep_id": SID}, None, json.dumps(other).encode())
    with pytest.raises(DecodeError, match="its body is a sweep.cancel"):
        sweep_command({"kind": "extend", "sweep_id": SID}, None, cancellation(SID).body)
    with pytest.raises(DecodeError, match="its body is a sweep.submit"):
        sweep_command({"kind": "cancel", "sweep_id": SID}, None, submission(parse_spec(SPEC), SID).body)
