"""No submitter trips a node's breaker with words or exit codes (issue 39, item 4).

Under ``--runtime docker``, a trial exiting 125 (docker's own "the runtime failed" code) after printing
"OCI runtime create failed", and a trial printing "No space left on device: '<its own cwd>'" and a made-up
uncorrectable ECC error, each in sweeps of their own, used to count as evidence against the node: two small
sweeps idled the agent for 600 s. Now a container that ran is the trial's exit and text is never evidence:
with ``--max-node-failures 2`` (two trials of two sweeps would trip it) the agent keeps taking trials and a
clean sweep completes on it within a minute. ``cpus: 1m`` and memory under 6 MiB, which docker refuses, are
refused by ``validate`` and ``submit`` naming the field and value, before any node sees them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster
from hostile import Hostile, bystander_spec

IMAGE = "spotsweep-worker:cpu"  # `make images`
pytestmark = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0,
    reason=f"needs docker and the {IMAGE} image (make images)")

OCI = "docker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: initialization error"
WORDS = ("echo \"OSError: [Errno 28] No space left on device: '$PWD/checkpoint.pt'\" >&2; "
         "echo 'RuntimeError: CUDA error: uncorrectable ECC error encountered' >&2; exit 1")


@pytest.fixture()
def docker_agent(cluster: Cluster, database_url: str, rabbit_url: str, tmp_path: Path) -> Iterator[Hostile]:
    """The hostile services with a docker agent whose breaker trips at two trials of two sweeps."""
    h = Hostile(cluster, database_url, rabbit_url, tmp_path)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu", "--runtime", "docker", "--default-image", IMAGE,
                  "--workdir", str(tmp_path / "agent"), "--max-node-failures", "2")
    h.bystander = h.submit(bystander_spec())
    yield h


def failing(name: str, script: str) -> dict[str, Any]:
    return {"name": name, "command": ["sh", "-c", script], "metric": {"name": "score", "mode": "min"},
            "space": {"x": [0, 1, 2]}, "resources": {"gpus": 0, "class": "cpu"}, "max_concurrent": 2,
            "retries": {"max_failures": 0}}


def test_exit_125_printed_node_errors_and_refused_resources_leave_the_breaker_closed(
        docker_agent: Hostile, tmp_path: Path) -> None:
    h = docker_agent
    for bad, said in (("cpus: 1m", "resources.cpus"), ("memory: '1'", "resources.memory"),
                      ("memory: 4Mi", "resources.memory")):
        spec = {**bystander_spec(), "name": "tiny", "resources": {"gpus": 0, "class": "cpu", **yaml.safe_load(bad)}}
        path = tmp_path / "tiny.yaml"
        path.write_text(yaml.safe_dump(spec))
        value = repr(yaml.safe_load(bad)[said.split(".")[1]])
        for command in ("validate", "submit"):
            proc = h.cli(command, str(path))
            assert proc.returncode != 0 and said in proc.stderr and value in proc.stderr, (command, proc.stderr)
            assert "the least docker and podman run with" in proc.stderr and "Traceback" not in proc.stderr
    assert not h.sql("SELECT 1 FROM sweeps WHERE name = 'tiny'")

    sweeps = [h.submit(failing("exit125", f"echo '{OCI}' >&2; exit 125")), h.submit(failing("words", WORDS))]
    for sweep_id in sweeps:
        assert h.wait_sweep(sweep_id, timeout=180) == "failed"
    failures = h.sql("SELECT DISTINCT failure FROM run_events WHERE sweep_id = ANY(%s) AND failure IS NOT NULL", sweeps)
    assert failures == [("exit",)], failures  # the trials' own exits, 125 included: not the agent's, not refused
    errors = [e for (e,) in h.sql("SELECT error FROM trial_results WHERE sweep_id = ANY(%s)", sweeps)]
    assert len(errors) == 6 and sum(OCI in e for e in errors) == 3 and sum("No space left" in e for e in errors) == 3

    h.assert_clean_sweep_completes()  # within a minute, on the agent that ran all six
    agents = {a for (a,) in h.sql("SELECT DISTINCT agent FROM trials WHERE agent IS NOT NULL")}
    assert len(agents) == 1, agents
    log = (tmp_path / "agent.log").read_text()
    assert "agent stops taking trials" not in log, log[-3000:]
