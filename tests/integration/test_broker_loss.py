"""A broker that comes back empty (its vhost deleted and made again: a lost
disk, or a dead node holding a classic queue) loses no trial: PostgreSQL is
the record, and the planner publishes again what the broker no longer holds
(services/planner/reconcile.py). Real RabbitMQ, PostgreSQL and S3 (moto),
every service a separate process."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_for  # tests/support, on the path through tests/conftest.py
from vhosts import rabbitmqctl

pytestmark = pytest.mark.integration

# Each run appends "trial_id attempt" to $RUNS_FILE when it starts.
TRIAL = """
import os, time
from spotsweep import trial
with open(os.environ["RUNS_FILE"], "a") as f:
    print(os.environ["SPOTSWEEP_TRIAL_ID"], os.environ["SPOTSWEEP_ATTEMPT"], file=f)
for step in range(1, 4):
    time.sleep(0.1)
    trial.report(step, loss=trial.params["k"] * 10 + step)
"""


def spec(runs: Path) -> dict[str, Any]:
    script = runs.with_name("trial.py")
    script.write_text(TRIAL)
    return {
        "name": "brokerloss",
        "command": ["python", str(script)],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"k": list(range(12))},
        "max_concurrent": 4,
        "env": {"RUNS_FILE": str(runs)},
        "resources": {"gpus": 0, "class": "cpu"},
    }


def empty_broker(vhost: str) -> None:
    """The vhost deleted (every queue and message in it, every connection to it) and made again, empty."""
    rabbitmqctl("delete_vhost", vhost)
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")


def test_trials_queued_on_a_broker_that_comes_back_empty_run_exactly_once(
        cluster: Cluster, database_url: str, rabbit_url: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    sweep_id = cluster.submit(spec(runs))
    queued = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'queued'"
    assert wait_for(database_url, queued, (sweep_id,), lambda n: n == 4) == 4, cluster.logs()  # the first window
    empty_broker(rabbit_url.rsplit("/", 1)[1])
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu")
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,),
                     lambda s: s != "running", timeout=180)
    assert state == "completed", cluster.logs()
    codes = cluster.stop()
    assert codes == {"planner": 0, "collector": 0, "agent": 0}, (codes, cluster.logs())
    started = Counter(runs.read_text().splitlines())
    assert len(started) == 12, started  # every trial ran (each has one attempt here)
    assert set(started.values()) == {1}, started  # and each attempt exactly once
    assert "republished" in cluster.logs(tail=20000)
