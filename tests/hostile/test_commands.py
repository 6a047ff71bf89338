"""Hostile commands and trial messages, posted raw past the CLI's own checks,
through the real services: a trial name that would render megabytes, a trial
message whose command is empty, an extension of a sweep that does not exist.
Each ends, the bystander completes with every point, outputs stay clean."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pika
import pytest
from hostile import Hostile

from spotsweep.shared import topology
from spotsweep.shared.messages import TrialFinished, TrialMessage, decode, encode

pytestmark = pytest.mark.integration


def test_a_trial_name_that_would_render_megabytes_is_rejected_before_any_trial(hostile: Hostile) -> None:
    sweep_id = f"widename-{uuid.uuid4().hex[:8]}"
    body = {"name": "widename", "command": ["python", "-c", "pass"], "metric": {"name": "loss"}, "space": {"x": [0, 1]},
            "resources": {"gpus": 0, "class": "cpu"}, "trial_name": "{index:>10000000}"}
    hostile.post_raw(json.dumps(body).encode(), {"sweep_id": sweep_id})
    assert hostile.wait_sweep(sweep_id) == "rejected"
    error = hostile.sql("SELECT error FROM sweeps WHERE sweep_id = %s", sweep_id)[0][0]
    assert "trial_name: width or precision 10000000" in error and len(error) < 1000
    assert hostile.trials(sweep_id) == []
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()


def test_a_trial_message_with_an_empty_command_fails_that_run_and_the_agent_goes_on(hostile: Hostile) -> None:
    with pika.BlockingConnection(pika.URLParameters(hostile.rabbit_url)) as conn:
        ch = conn.channel()
        ends = ch.queue_declare("", exclusive=True).method.queue  # what the agent reports, as the planner would see it
        ch.queue_bind(ends, topology.EVENTS_EXCHANGE, "trial.finished.#")
        forged = TrialMessage(sweep_id="forged-0000cafe", trial_id="forged-0000cafe.0", attempt=1, trial_name="forged",
                              index=0, params={}, argv=[], metric="loss", resource_class="cpu")
        ch.confirm_delivery()
        # As the planner's user (guest here, which agents accept): this tests the empty command, not the sender check.
        user = pika.URLParameters(hostile.rabbit_url).credentials.username
        ch.basic_publish(topology.TRIALS_EXCHANGE, "cpu", encode(forged), pika.BasicProperties(delivery_mode=2, user_id=user))
        finished = _first_end(ch, ends, forged.trial_id, timeout=60)
    assert finished.outcome == "failed" and "the trial's command is empty" in (finished.error or "")
    hostile.assert_bystander_complete()  # the agent took the bystander's trials before and after
    assert hostile.cluster.procs["agent"].poll() is None
    hostile.assert_outputs_clean()


def _first_end(ch: Any, queue: str, trial_id: str, timeout: float) -> TrialFinished:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.2)
            continue
        event = decode(body)
        if isinstance(event, TrialFinished) and event.trial_id == trial_id:
            return event
    raise AssertionError(f"no trial.finished for {trial_id} within {timeout}s")


def test_an_extension_of_a_sweep_that_does_not_exist_leaves_no_row(hostile: Hostile) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    hostile.post_raw(json.dumps({"trials": 5, "budget": {}, "version": 0}).encode(), {"kind": "extend", "sweep_id": ghost})
    sentinel = f"sentinel-{uuid.uuid4().hex[:8]}"  # the queue is in order: once this is seen, so was the extension
    hostile.post_raw(b"{}", {"sweep_id": sentinel})
    assert hostile.wait_sweep(sentinel) == "rejected"
    assert hostile.sql("SELECT count(*) FROM sweeps WHERE sweep_id = %s", ghost) == [(0,)]
    proc = hostile.cli("extend", ghost, "--trials", "5")
    assert proc.returncode == 2 and ghost in proc.stderr
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()
