"""Containers that hold (issue 39, 1 and 7), through the real services and a real Docker daemon: one agent with
``--runtime docker`` and a trial user, as docs/security.md recommends, meets a setuid binary in the spec's image,
the node's Docker socket and /root as inputs, ``network: host`` and ``gpus: 100000``; each ends refused with the
reason or held, and a clean sweep with a node-path input under ``--input-paths`` then completes on the same agent.

One cluster for the whole file (the machine is slow): a single test walks the cases in turn."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cluster import Cluster

from tests.integration.test_inputs_s3 import USER, _ensure_user
from tests.support.trial_image import need

pytestmark = pytest.mark.integration

BASE = "spotsweep-python:3.11-bookworm"  # `make images` builds it
IMAGE = "spotsweep-setuid-test:1"
SETUID = "/usr/local/bin/supy"  # a setuid-root copy of the image's python
# Reports what it is inside the container: its uids, its effective and bounding capabilities, NoNewPrivs, and
# whether it could read a root-only file of the image; no spotsweep package in the image, so plain JSON lines.
PROBE = r"""
import json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
try:
    open("/etc/shadow").read()
    shadow = 1.0
except OSError:
    shadow = 0.0
values = {"euid": float(os.geteuid()), "cap_eff": float(int(status["CapEff"], 16)),
          "cap_bnd": float(int(status["CapBnd"], 16)), "nnp": float(status["NoNewPrivs"].strip()), "shadow": shadow}
if os.path.isdir("data"):
    values["data"] = float(open("data/hello.txt").read() == "hello")
with open(os.environ["SPOTSWEEP_METRICS"], "a") as out:
    out.write(json.dumps({"step": 1, **values}) + "\n")
"""


def setuid_image() -> str:
    """:data:`IMAGE`: the base with a setuid-root python, built once per machine."""
    docker = need("docker")
    if subprocess.run([docker, "image", "inspect", IMAGE], capture_output=True).returncode == 0:
        return IMAGE
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Dockerfile").write_text(f"FROM {BASE}\nRUN cp \"$(readlink -f \"$(command -v python3)\")\" "
                                              f"{SETUID} && chmod 4755 {SETUID}\n")
        subprocess.run([docker, "build", "--quiet", "-t", IMAGE, tmp], check=True, capture_output=True, timeout=600)
    return IMAGE


def spec(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": [SETUID, "-c", PROBE.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "euid"}, "image": IMAGE, "resources": {"gpus": 0, "class": "cpu"},
            "retries": {"max_failures": 0}, **fields}


def trial(database_url: str, cluster: Cluster, sweep_id: str, timeout: float = 180) -> dict[str, Any]:
    """The sweep's one trial once it ended (completed or failed)."""
    sql = ("SELECT t.state, (SELECT max(e.failure) FROM run_events e WHERE e.sweep_id = t.sweep_id), t.error, t.metrics "
           "FROM trial_results t WHERE t.sweep_id = %s AND t.state IN ('completed', 'failed')")
    rows = wait_rows(database_url, sql, sweep_id, timeout=timeout)
    assert len(rows) == 1, (rows, cluster.logs())
    return dict(zip(("state", "failure", "error", "metrics"), rows[0]))


def wait_rows(database_url: str, sql: str, *args: Any, timeout: float = 180) -> list[tuple[Any, ...]]:
    from waiting import wait_until  # tests/support

    found: list[list[tuple[Any, ...]]] = [[]]

    def rows() -> bool:
        with psycopg.connect(database_url) as conn:
            found[0] = conn.execute(sql, args).fetchall()
        return bool(found[0])

    wait_until(rows, timeout=timeout)
    return found[0]


def test_a_hostile_spec_gets_no_root_no_socket_no_host_network_and_the_node_stays_open(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    setuid_image()
    _ensure_user()
    allowed = tmp_path / "datasets"
    (allowed / "corpus").mkdir(parents=True)
    (allowed / "corpus" / "hello.txt").write_text("hello")
    (allowed / "corpus").chmod(0o755)
    (allowed / "docker").symlink_to("/run/docker.sock")  # a link inside the allowed folder: checked after it
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--runtime", "docker", "--trial-user", USER,
                  "--workdir", str(tmp_path / "agent"), "--input-paths", str(allowed), "--max-node-failures", "1")

    held = trial(database_url, cluster, cluster.submit(spec("setuid")))
    assert held["state"] == "completed", (held, cluster.logs())
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True, check=True).stdout)
    m = held["metrics"]
    assert (m["euid"], m["cap_eff"], m["cap_bnd"], m["nnp"], m["shadow"]) == (uid, 0, 0, 1, 0), m

    refusals = {
        "socket": ({"inputs": [{"from": "/run/docker.sock", "to": "d"}]}, "input /run/docker.sock: not under"),
        "root": ({"inputs": [{"from": "/root", "to": "d"}]}, "input /root: not under this agent's --input-paths"),
        "link": ({"inputs": [{"from": str(allowed / "docker"), "to": "d"}]}, "(resolves to /run/docker.sock)"),
        "host": ({"network": "host"}, "network: host"),
        "gpus": ({"resources": {"gpus": 100000, "class": "cpu"}},
                 "resources.gpus: 100000 requested, this agent's slots have 0"),
    }
    sweeps = {name: cluster.submit(spec(name, **fields)) for name, (fields, _) in refusals.items()}
    for name, (_, why) in refusals.items():
        row = trial(database_url, cluster, sweeps[name])
        assert (row["state"], row["failure"]) == ("failed", "refused") and why in (row["error"] or ""), (name, row)

    # Five refusals of five sweeps with --max-node-failures 1: none is the node's, so the agent still takes trials,
    # and a node-path input under --input-paths is mounted read-only in the container as before.
    clean = cluster.submit(spec("clean", inputs=[{"from": str(allowed / "corpus"), "to": "data"}]))
    after = trial(database_url, cluster, clean, timeout=60)  # within a minute
    assert after["state"] == "completed" and after["metrics"]["data"] == 1.0, (after, cluster.logs())
    assert "agent stops taking trials" not in (tmp_path / "agent.log").read_text()
