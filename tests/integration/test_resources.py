"""Resource requests kept by real agents (services as processes over RabbitMQ, PostgreSQL and S3): a trial past
its ``resources.memory`` fails with the reason while its neighbour on the agent completes; an agent with
``--memory 1Gi`` never runs three ``400Mi`` trials at once; a trial bigger than its agent fails with what it
asked and what the agent offers instead of waiting forever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cluster import Cluster, wait_for  # tests/support

pytestmark = pytest.mark.integration
TRIAL = Path(__file__).with_name("resource_trial.py")


def spec(name: str, out: Path, memory: str, space: dict[str, Any], role: str, mib: str, seconds: str) -> dict[str, Any]:
    return {"name": name, "command": ["python", str(TRIAL), role, mib, seconds, str(out)], "metric": {"name": "loss"},
            "space": space, "max_concurrent": 10, "retries": {"max_failures": 0},
            "resources": {"gpus": 0, "class": "cpu", "memory": memory}}


def results(database_url: str, sweep_id: str) -> dict[str, tuple[str, str | None]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT trial_name, state, error FROM trial_results WHERE sweep_id = %s", (sweep_id,)).fetchall()
    return {name: (state, error) for name, state, error in rows}


def finished(cluster: Cluster, database_url: str, sweep_id: str) -> None:
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running",
                     timeout=120)
    assert state in ("completed", "failed"), cluster.logs()


def test_a_trial_past_its_memory_fails_with_the_reason_and_its_neighbour_completes(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "2", "--memory", "1Gi")
    body = spec("leak", tmp_path, "256Mi", {"role": ["hog", "calm"]}, "{role}", "64", "8")
    body["trial_name"] = "{role}"
    sweep_id = cluster.submit(body)
    finished(cluster, database_url, sweep_id)
    got = results(database_url, sweep_id)
    assert got["calm"] == ("completed", None), cluster.logs()
    state, error = got["hog"]
    assert state == "failed" and "exceeded its memory request (256 MiB" in (error or ""), cluster.logs()
    assert not (tmp_path / "hog.json").exists()  # killed before it got anywhere
    calm = json.loads((tmp_path / "calm.json").read_text())
    assert calm["end"] - calm["start"] >= 8  # it ran on beside the hog, untouched


def test_an_agent_never_runs_more_than_its_memory_and_refuses_what_it_can_never_hold(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "3", "--memory", "1Gi")
    sweep_id = cluster.submit(spec("fit", tmp_path, "400Mi", {"i": [0, 1, 2, 3, 4]}, "calm", "100", "2"))
    huge = cluster.submit(spec("huge", tmp_path, "64Gi", {"i": [0]}, "calm", "0", "0"))
    finished(cluster, database_url, sweep_id)
    finished(cluster, database_url, huge)
    assert {s for s, _ in results(database_url, sweep_id).values()} == {"completed"}, cluster.logs()
    spans = [json.loads(p.read_text()) for p in tmp_path.glob("fit_*.json")]
    assert len(spans) == 5
    overlap = max(sum(1 for s in spans if s["start"] <= t < s["end"]) for t in (s["start"] for s in spans))
    assert overlap <= 2  # 3 x 400 MiB > 1 GiB: the third waits for room though a slot is free
    [(state, error)] = results(database_url, huge).values()
    assert state == "failed" and "resources.memory asks for 64 GiB, but this agent of class cpu offers 1 GiB" in (error or "")
