"""Six trials on one agent read one 64 MiB ``inputs`` prefix that moto's S3 served once, and cannot write to it.

Twice: through the real services (planner, collector, agent as processes over
RabbitMQ, PostgreSQL and moto), the agent's log showing one staging; and
through the agent's runner alone, counting every byte the S3 server sent.

The real runner (``run_trial``, the agent's per-slot call) over moto's S3
server, the six trials in six threads at once as the agent's slots run them,
each as an unprivileged trial user (``--trial-user``: a trial running as
root could write anywhere). What the S3 server served is counted by the
store's own downloads: every ranged or whole GET of the input bucket.
Needs root (to run trials as another user), else it is skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import psycopg

from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.services.agent.trial_user import UserPool, resolve
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.messages import TrialFinished, TrialMessage
from spotsweep.shared.spec import parse_spec
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs trials as another user: needs root")
USER = "spotsweep-input"
SIZE = 64 * 2**20
PYTHON = "/usr/bin/python3"  # the system's: the trial user may not reach the test's virtualenv

# The trial: checks what it reads, then tries every way to change the input; reports what got through.
TRIAL = r"""
import hashlib, json, os
data = "data/weights.bin"
digest = hashlib.sha256(open(data, "rb").read()).hexdigest()
writes = 0
for attempt in (lambda: open(data, "ab"), lambda: os.chmod(data, 0o666), lambda: open("data/new", "w"),
                lambda: os.unlink(data), lambda: os.rename(data, "data/moved"), lambda: os.chmod("data", 0o777),
                lambda: os.rename(os.path.realpath("data"), "/tmp/stolen-input")):
    try:
        attempt()
        writes += 1
    except OSError:
        pass
with open(os.environ["SPOTSWEEP_METRICS"], "a") as f:
    f.write(json.dumps({"step": 1, "match": float(digest == os.environ["EXPECT"]), "writes": writes}) + "\n")
"""


class Counting(S3ArtifactStore):
    """The real S3 adapter, counting the bytes each GET brought back (shared by its :meth:`in_bucket` copies)."""

    served: list[int]

    def get_file(self, key: str, path: Path) -> None:
        super().get_file(key, path)
        self.served.append(Path(path).stat().st_size)

    def get_range_into(self, key: str, offset: int, length: int, fd: int) -> tuple[int, int]:
        got = super().get_range_into(key, offset, length, fd)
        self.served.append(got[0])
        return got


@pytest.fixture()
def workdir() -> Iterator[Path]:
    """The agent's workdir where the trial user can reach it (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="spotsweep-inputs-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ensure_user() -> None:
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)


@pytest.mark.integration
def test_a_sweep_of_six_trials_stages_its_input_once_on_the_agent(cluster: Cluster, s3_env: dict[str, str],
                                                                    workdir: Path) -> None:
    _ensure_user()
    endpoint, keys = s3_env["SPOTSWEEP_S3_ENDPOINT"], (s3_env["SPOTSWEEP_S3_ACCESS_KEY"], s3_env["SPOTSWEEP_S3_SECRET_KEY"])
    bucket = "datasets-" + s3_env["SPOTSWEEP_S3_BUCKET"][-8:]
    payload = os.urandom(SIZE)
    S3ArtifactStore(endpoint, *keys, bucket).put_bytes("tinystories/v3/weights.bin", payload)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "6", "--trial-user", USER, "--workdir", str(workdir))
    sweep = cluster.submit({
        "name": "inputs", "command": [PYTHON, "-c", TRIAL.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "match", "mode": "max"}, "space": {"k": list(range(6))}, "max_concurrent": 6,
        "resources": {"gpus": 0, "class": "cpu"}, "env": {"EXPECT": hashlib.sha256(payload).hexdigest()},
        "inputs": [{"from": f"s3://{bucket}/tinystories/v3/", "to": "data"}],
    })
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    sql = "SELECT count(*) FILTER (WHERE state IN ('completed', 'failed')) FROM trial_results WHERE sweep_id = %s"
    assert wait_for(db, sql, (sweep,), lambda n: n >= 6, timeout=180) == 6, cluster.logs()
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT state, metrics, error FROM trial_results WHERE sweep_id = %s", (sweep,)).fetchall()
        staging = [r[0] for r in conn.execute("SELECT body->'staging' FROM trial_events WHERE sweep_id = %s AND kind = "
                                              "'trial.started'", (sweep,))]
    assert len(staging) == 6 and all(isinstance(s, (int, float)) and s >= 0 for s in staging), staging  # journalled
    for state, metrics, error in rows:
        assert state == "completed", error
        assert metrics["match"] == 1.0 and metrics["writes"] == 0.0, metrics  # read it whole, changed nothing
    agent_log = (cluster.tmp / "agent.log").read_text()
    assert agent_log.count("input staged") == 1, agent_log  # one download on the node for six trials
    trees = [p for p in (workdir / "inputs").iterdir() if not p.name.startswith(".")]
    assert len(trees) == 1 and (trees[0] / "weights.bin").stat().st_size == SIZE


def test_six_trials_share_one_download_of_a_read_only_input(s3_env: dict[str, str], workdir: Path) -> None:
    _ensure_user()
    endpoint, keys = s3_env["SPOTSWEEP_S3_ENDPOINT"], (s3_env["SPOTSWEEP_S3_ACCESS_KEY"], s3_env["SPOTSWEEP_S3_SECRET_KEY"])
    bucket = "datasets-" + s3_env["SPOTSWEEP_S3_BUCKET"][-8:]
    payload = os.urandom(SIZE)
    S3ArtifactStore(endpoint, *keys, bucket).put_bytes("tinystories/v3/weights.bin", payload)
    store = Counting(endpoint, *keys, s3_env["SPOTSWEEP_S3_BUCKET"])
    store.served = []
    spec = parse_spec({"name": "s", "command": "python trial.py", "metric": {"name": "match", "mode": "max"},
                       "inputs": [{"from": f"s3://{bucket}/tinystories/v3/", "to": "data"}]})
    config = RunnerConfig(agent_id="a", workdir=workdir, trial_users=UserPool([resolve(USER)]))
    finals: list[TrialFinished | None] = []

    def slot(i: int) -> None:
        msg = TrialMessage(sweep_id="sw", trial_id=f"sw.{i}", attempt=1, trial_name=f"t{i}", index=i, params={},
                           argv=[PYTHON, "-c", TRIAL], metric="match", env={"EXPECT": hashlib.sha256(payload).hexdigest()},
                           inputs=spec.inputs)
        finals.append(run_trial(msg, store, lambda e: None, config, RunControls()))

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(finals) == 6
    for final in finals:
        assert final is not None and final.outcome == "completed", final.error if final else None
        assert final.metrics == {"match": 1.0, "writes": 0.0}, final  # read it whole, changed nothing
    assert sum(store.served) == SIZE  # the 64 MiB came from S3 once, for six trials
    trees = [p for p in (workdir / "inputs").iterdir() if not p.name.startswith(".")]
    assert len(trees) == 1 and (trees[0] / "weights.bin").read_bytes() == payload
