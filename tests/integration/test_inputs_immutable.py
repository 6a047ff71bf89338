"""A root trial cannot change a staged input for the trials after it (issue 40), through the real services.

Process mode, the agent run as root with ``--allow-root-trials`` (local mode as root runs trials so too):
0444 does not stop root, so each trial gets a mount namespace where the input's tree is a read-only bind
mount, and a tree changed anyway (by a root process outside any namespace) is staged again at the next link.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from tests.support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="root trials: needs root")]

# Checks the shard, then appends to it as the seed's corrupting trial did; reports what got through.
TRIAL = r"""
import hashlib, json, os
shard = "data/shard.bin"
match = hashlib.sha256(open(shard, "rb").read()).hexdigest() == os.environ["EXPECT"]
try:
    with open(shard, "ab") as f:
        f.write(b"oops!!")
    wrote = 1.0
except OSError:
    wrote = 0.0
with open(os.environ["SPOTSWEEP_METRICS"], "a") as out:
    out.write(json.dumps({"step": 1, "match": float(match), "wrote": wrote, "root": float(os.getuid() == 0)}) + "\n")
"""


@pytest.fixture()
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="spotsweep-ro-inputs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_root_trial_appending_to_a_staged_shard_changes_nothing_the_next_trials_read(
        cluster: Cluster, s3_env: dict[str, str], workdir: Path) -> None:
    bucket = "datasets-" + s3_env["SPOTSWEEP_S3_BUCKET"][-8:]
    shard = os.urandom(4 << 20)
    S3ArtifactStore(s3_env["SPOTSWEEP_S3_ENDPOINT"], s3_env["SPOTSWEEP_S3_ACCESS_KEY"], s3_env["SPOTSWEEP_S3_SECRET_KEY"],
                    bucket).put_bytes("corpus/v1/shard.bin", shard)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "1", "--allow-root-trials", "--workdir", str(workdir))
    body = {"name": "shards", "command": ["python", "-c", TRIAL.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "match", "mode": "max"}, "space": {"k": [0, 1, 2]}, "max_concurrent": 1,
            "resources": {"gpus": 0, "class": "cpu"}, "env": {"EXPECT": hashlib.sha256(shard).hexdigest()},
            "inputs": [{"from": f"s3://{bucket}/corpus/v1/", "to": "data"}], "retries": {"max_failures": 0}}
    sweep = cluster.submit(body)
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    done = "SELECT count(*) FILTER (WHERE state IN ('completed', 'failed')) FROM trial_results WHERE sweep_id = %s"
    assert wait_for(db, done, (sweep,), lambda n: n >= 3, timeout=180) == 3, cluster.logs()
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT state, metrics, error FROM trial_results WHERE sweep_id = %s", (sweep,)).fetchall()
    for state, metrics, error in rows:
        assert state == "completed", error
        assert metrics == {**metrics, "match": 1.0, "wrote": 0.0, "root": 1.0}, metrics  # root, and still read-only
    [tree] = [p for p in (workdir / "inputs").iterdir() if not p.name.startswith(".")]
    assert (tree / "shard.bin").read_bytes() == shard

    # Changed anyway, by root outside any trial's namespace: the next trial gets the shard staged again.
    with open(tree / "shard.bin", "ab") as f:
        f.write(b"oops!!")
    again = cluster.submit({**body, "name": "shards-again", "space": {"k": [3]}})
    assert wait_for(db, done, (again,), lambda n: n >= 1, timeout=120) == 1, cluster.logs()
    with psycopg.connect(db) as conn:
        [(state, metrics)] = conn.execute("SELECT state, metrics FROM trial_results WHERE sweep_id = %s", (again,))
    assert (state, metrics["match"]) == ("completed", 1.0), (metrics, cluster.logs())
    assert (cluster.tmp / "agent.log").read_text().count("input changed on this node since it was staged") == 1
