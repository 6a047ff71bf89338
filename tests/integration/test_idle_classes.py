"""Trials of a class no agent serves do not wait in silence: submit and status name the class."""

from __future__ import annotations

import yaml
from cluster import Cluster, wait_for  # tests/support

SPEC = {"name": "cpu-only", "command": ["python", "-c", "from spotsweep import trial; trial.report(1, loss=0.5)"],
        "metric": {"name": "loss"}, "space": {"x": [1, 2]}, "resources": {"gpus": 0, "class": "cpu"}}
ADVICE = "no agent serves resource class 'cpu' (queue spotsweep.trials.cpu has no consumer)"


def test_submit_and_status_warn_until_an_agent_serves_the_class(cluster: Cluster, database_url: str) -> None:
    cluster.start("planner", "planner")
    cluster.start("gpu-agent", "agent")  # serves the default class, gpu: not this sweep's
    path = cluster.tmp / "cpu.yaml"

    path.write_text(yaml.safe_dump(SPEC))
    submitted = cluster.cli("submit", str(path))
    assert submitted.returncode == 0 and ADVICE in submitted.stderr, submitted.stderr
    assert "spotsweep agent --class cpu" in submitted.stderr
    sweep_id = submitted.stdout.strip().splitlines()[-1]
    wait_for(database_url, "SELECT queued FROM sweep_results WHERE sweep_id = %s", (sweep_id,), lambda n: n == 2)
    status = cluster.cli("status")
    assert status.returncode == 0 and ADVICE in status.stderr, status.stderr

    cluster.start("cpu-agent", "agent", "--class", "cpu")
    wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed")
    again = cluster.cli("submit", str(path))
    assert again.returncode == 0 and "no agent serves" not in again.stderr, again.stderr
    assert "no agent serves" not in cluster.cli("status").stderr


def test_a_request_no_agent_of_the_class_can_hold_is_named_at_submit_and_in_status(
        cluster: Cluster, database_url: str) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent = cluster.start("agent", "agent", "--class", "cpu", "--memory", "1Gi", "--cpus", "2")
    seen = "SELECT memory FROM agent_capacity WHERE resource_class = 'cpu'"
    assert wait_for(database_url, seen, (), lambda m: m == 2**30) == 2**30, cluster.logs()
    cluster.term("agent")  # seen a moment ago, gone now: the trials stay queued for `status` to explain
    agent.wait(60)
    path = cluster.tmp / "huge.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "name": "huge", "resources": {"gpus": 0, "class": "cpu", "memory": "64Gi"}}))

    submitted = cluster.cli("submit", str(path))
    assert submitted.returncode == 0, submitted.stderr
    too_big = "no agent of class cpu offers 64 GiB (resources.memory; the most any of 1 agent seen offers is 1 GiB)"
    assert f"warning: {too_big}" in submitted.stderr, submitted.stderr
    sweep_id = submitted.stdout.strip().splitlines()[-1]
    wait_for(database_url, "SELECT queued FROM sweep_results WHERE sweep_id = %s", (sweep_id,), lambda n: n == 2)
    status = cluster.cli("status")
    assert status.returncode == 0 and f"{sweep_id}: waiting: {too_big}" in status.stdout, status.stdout

    small = cluster.tmp / "small.yaml"
    small.write_text(yaml.safe_dump({**SPEC, "name": "small", "resources": {"gpus": 0, "class": "cpu", "memory": "512Mi"}}))
    fits = cluster.cli("submit", str(small))
    assert fits.returncode == 0 and "offers" not in fits.stderr, fits.stderr
