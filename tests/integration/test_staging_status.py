"""A trial whose agent is still staging its inputs shows in ``status`` as staging, not as waiting for a slot
nor as training (issue 30): real planner, collector and agent processes over RabbitMQ, PostgreSQL and a
private moto S3 server that is paused mid-staging."""

from __future__ import annotations

import os
import signal

import pytest
from cluster import Cluster, wait_for  # tests/support
from servers import MotoS3

from spotsweep.shared.artifacts import S3ArtifactStore
from waiting import wait_until  # tests/support

pytestmark = pytest.mark.integration


def test_status_says_a_trial_is_staging_until_its_process_starts(rabbit_url: str, database_url: str, tmp_path) -> None:
    s3 = MotoS3()  # a private one, to pause
    env = {**os.environ, "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_DATABASE_URL": database_url,
           "SPOTSWEEP_HOME": str(tmp_path / "home"), **s3.env("staging")}
    cluster = Cluster(env, tmp_path)
    try:
        S3ArtifactStore(s3.endpoint, "testing", "testing-secret", "datasets").put_bytes("v1/x.bin", b"x" * 1024)
        cluster.start("planner", "planner")
        cluster.start("collector", "collector")
        cluster.start("agent", "agent", "--class", "cpu", "--workdir", str(tmp_path / "work"))
        consumers = "SELECT count(*) FROM agent_capacity WHERE resource_class = 'cpu'"
        assert wait_for(database_url, consumers, (), lambda n: n >= 1) >= 1, cluster.logs()
        os.kill(s3.proc.pid, signal.SIGSTOP)  # the agent's staging now hangs on S3
        sweep_id = cluster.submit({
            "name": "staged", "command": ["python", "-c", "from spotsweep import trial; trial.report(1, loss=0.5)"],
            "metric": {"name": "loss"}, "resources": {"gpus": 0, "class": "cpu"},
            "inputs": [{"from": "s3://datasets/v1/", "to": "data"}]})
        line = f"{sweep_id}: staging: 1 queued trial(s) being set up"
        assert wait_until(lambda: line in cluster.cli("status").stdout, 60), (cluster.cli("status").stdout,
                                                                              cluster.logs())
        os.kill(s3.proc.pid, signal.SIGCONT)
        state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,),
                         lambda s: s != "running", timeout=120)
        assert state == "completed", cluster.logs()
        assert "staging:" not in cluster.cli("status").stdout
    finally:
        os.kill(s3.proc.pid, signal.SIGCONT)
        cluster.kill_all()
        s3.stop()
