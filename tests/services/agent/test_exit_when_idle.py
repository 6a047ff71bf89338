"""``spotsweep agent --exit-when-idle SECONDS`` on real RabbitMQ: scale-to-zero that never stops a trial.

The agent exits 0 once it has had no trial for SECONDS (its consumer gone
from the queue, its connection closed); trials it was given run to their
end first, so an autoscaler that waits for agents to exit (a KEDA
ScaledJob) never loses one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pika

from tests.support.cluster import Cluster, wait_for

# Four seconds of "training" per trial (longer than the idle time below), then a result.
SLOW = "import time; time.sleep(4); from spotsweep import trial; trial.report(1, loss=0.5)"


def consumers(rabbit_url: str, queue: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(rabbit_url)) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.consumer_count)


def test_an_idle_agent_exits_0_and_leaves_the_queue(rabbit_url: str, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPOTSWEEP_HOME": str(tmp_path / "home"),
           "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"]}
    done = subprocess.run([sys.executable, "-m", "spotsweep", "agent", "--class", "cpu", "--workdir", str(tmp_path / "w"),
                           "--exit-when-idle", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "agent ready" in done.stderr and "no trial for 1 s (--exit-when-idle): stopping, exit 0" in done.stderr
    assert "Traceback" not in done.stderr
    assert consumers(rabbit_url, "spotsweep.trials.cpu") == 0


def test_an_agent_exits_when_idle_only_after_the_trials_it_took_have_ended(cluster: Cluster, database_url: str,
                                                                           rabbit_url: str) -> None:
    cluster.start("planner", "planner")
    sweep_id = cluster.submit({"name": "idle-exit", "command": ["python", "-c", SLOW], "metric": {"name": "loss"},
                               "space": {"x": [1, 2]}, "max_concurrent": 2, "resources": {"gpus": 0, "class": "cpu"}})
    wait_for(database_url, "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'queued'", (sweep_id,),
             lambda n: n == 2)
    # One slot, idle after 2 s: each trial runs 4 s, the second waits in the queue meanwhile. An agent
    # that counted only the time since a trial arrived would leave during the first and never take the second.
    agent = cluster.start("agent", "agent", "--class", "cpu", "--slots", "1", "--workdir", str(cluster.tmp / "w"),
                          "--exit-when-idle", "2")
    assert agent.wait(120) == 0, (cluster.tmp / "agent.log").read_text()[-3000:]
    # By the time it exited, both trials had run to their end here: none was stopped, lost or handed back.
    states = wait_for(database_url, "SELECT array_agg(state || ':' || attempt ORDER BY state) FROM trials "
                      "WHERE sweep_id = %s", (sweep_id,), lambda s: s == ["completed:1", "completed:1"], timeout=30)
    assert states == ["completed:1", "completed:1"]
    assert consumers(rabbit_url, "spotsweep.trials.cpu") == 0
