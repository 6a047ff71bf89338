"""Hostile messages on ``spotsweep.sweeps``, posted raw as any AMQP client could, through the real services.

Each test shows the three things of the hostile suite: the bad message ends
(dead-lettered, with its reason in the planner's log, or recorded as a
``rejected`` sweep with a bounded reason), the bystander sweep completes with
every point stored, and ``ls``, ``status``, ``report`` and ``report --csv``
stay clean.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hostile import Hostile

from spotsweep.shared.limits import ERROR_CHARS

pytestmark = pytest.mark.integration


def spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["python", "-c", "pass"], "metric": {"name": "loss"}, "space": {"x": [0]},
            "resources": {"gpus": 0, "class": "cpu"}, **extra}


def sweep_ids(hostile: Hostile) -> set[str]:
    return {r[0] for r in hostile.sql("SELECT sweep_id FROM sweeps")}


def planner_log(hostile: Hostile) -> str:
    return (hostile.cluster.tmp / "planner.log").read_text(errors="replace")


def assert_dead_lettered(hostile: Hostile, body: bytes, reason: str) -> None:
    """The message reached the dead-letter queue, and the planner logged why."""
    dead = hostile.dead_letters(wait=30)
    assert any(b == body for _, b in dead), [b[:100] for _, b in dead]
    assert reason in planner_log(hostile), planner_log(hostile)[-3000:]


def assert_harmless(hostile: Hostile) -> None:
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()


def test_an_invalid_spec_named_with_markup_is_rejected_under_its_id(hostile: Hostile) -> None:
    sweep_id = f"boom-{uuid.uuid4().hex[:8]}"
    hostile.post_raw(json.dumps({"name": "[/boom]", "command": "[link=https://x]click[/link]"}).encode(),
                     {"sweep_id": sweep_id})
    assert hostile.wait_sweep(sweep_id) == "rejected"
    [(name, error)] = hostile.sql("SELECT name, error FROM sweeps WHERE sweep_id = %s", sweep_id)
    assert name == sweep_id and "name" in error
    assert_harmless(hostile)


@pytest.mark.parametrize("bad_id", ["../../evil/x", "x\x1b[2J\x1b]0;pwned\x07-0000beef"])
def test_a_sweep_id_header_of_another_shape_is_dead_lettered_and_leaves_no_row(hostile: Hostile, bad_id: str) -> None:
    before = sweep_ids(hostile) | {hostile.bystander}  # its row may be written after this read
    body = json.dumps(spec("evil")).encode()
    hostile.post_raw(body, {"sweep_id": bad_id})
    assert_dead_lettered(hostile, body, "is not a sweep id")
    assert sweep_ids(hostile) == before
    assert not hostile.sql("SELECT 1 FROM trials WHERE sweep_id NOT IN (SELECT sweep_id FROM sweeps)")
    assert_harmless(hostile)


def test_cancels_of_unknown_sweeps_leave_no_rows(hostile: Hostile) -> None:
    before = sweep_ids(hostile) | {hostile.bystander}  # its row may be written after this read
    huge = "x" * 100_000 + "-0000beef"
    hostile.post_raw(b"{}", {"kind": "cancel", "sweep_id": huge})
    for _ in range(500):
        hostile.post_raw(b"{}", {"kind": "cancel", "sweep_id": f"ghost-{uuid.uuid4().hex[:8]}"})
    sentinel = f"sentinel-{uuid.uuid4().hex[:8]}"  # the queue is in order: once it is seen, so were the cancels
    hostile.post_raw(b"{}", {"sweep_id": sentinel})
    assert hostile.wait_sweep(sentinel) == "rejected"
    assert_dead_lettered(hostile, b"{}", "is not a sweep id")  # the 100 KB one
    assert sweep_ids(hostile) == before | {sentinel}
    assert "ghost-" not in hostile.cli("status").stdout
    assert_harmless(hostile)


def test_a_grid_too_large_to_count_is_rejected_naming_its_size(hostile: Hostile) -> None:
    sweep_id = f"huge-{uuid.uuid4().hex[:8]}"
    space = {f"p{i}": list(range(10)) for i in range(20)}  # 10^20 configs
    body = {**spec("huge"), "command": ["python", "-c", "pass", "{p0}"], "space": space}
    hostile.post_raw(json.dumps(body).encode(), {"sweep_id": sweep_id})
    assert hostile.wait_sweep(sweep_id) == "rejected"
    [(error,)] = hostile.sql("SELECT error FROM sweeps WHERE sweep_id = %s", sweep_id)
    assert "1e+20" in error
    assert_harmless(hostile)


def test_a_deeply_nested_body_is_a_decode_error(hostile: Hostile) -> None:
    sweep_id = f"deep-{uuid.uuid4().hex[:8]}"
    body = b"[" * 100_000 + b"]" * 100_000
    hostile.post_raw(body, {"sweep_id": sweep_id})
    assert hostile.wait_sweep(sweep_id) == "rejected"  # whoever waits on it sees it end
    assert_dead_lettered(hostile, body, "nested deeper than 64")
    assert "RecursionError" not in planner_log(hostile) and "Traceback" not in planner_log(hostile)
    assert_harmless(hostile)


def test_a_spec_with_200000_unknown_keys_is_rejected_with_a_bounded_error(hostile: Hostile) -> None:
    sweep_id = f"keys-{uuid.uuid4().hex[:8]}"
    body = {**spec("keys"), **{f"unknown_{i}": i for i in range(200_000)}}
    hostile.post_raw(json.dumps(body).encode(), {"sweep_id": sweep_id})
    assert hostile.wait_sweep(sweep_id) == "rejected"
    [(error,)] = hostile.sql("SELECT error FROM sweeps WHERE sweep_id = %s", sweep_id)
    assert len(error) <= ERROR_CHARS + 100 and "more problems" in error
    status = hostile.cli("status")
    assert status.returncode == 0 and len(status.stdout) < 100_000
    assert_harmless(hostile)
