"""Services killed with kill -9 mid-sweep and started again lose and
duplicate nothing; a cancel reaches running trials. Real RabbitMQ,
PostgreSQL and S3 (moto), every service a separate process."""

from __future__ import annotations

import subprocess
from typing import Any

import pika
import psycopg
import pytest

from cluster import Cluster, wait_for  # tests/support, on the path through tests/conftest.py
from spotsweep.shared.topology import COLLECTOR_QUEUE
from waiting import wait_until

pytestmark = pytest.mark.integration

SLOW = """
import time
from spotsweep import trial
for step in range(1, 6):
    time.sleep(float(trial.params["pause"]))
    trial.report(step, loss=trial.params["k"] * 10 + step)
"""


def spec(name: str, trials: int, pause: float, concurrent: int) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", SLOW.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"k": list(range(trials)), "pause": [pause]},
        "max_concurrent": concurrent,
        "resources": {"gpus": 0, "class": "cpu"},
    }


def _queue(rabbit_url: str, name: str) -> tuple[int, int]:
    """A queue's (ready messages, consumers), from RabbitMQ."""
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        method = conn.channel().queue_declare(name, passive=True).method
        return method.message_count, method.consumer_count
    finally:
        conn.close()


POINTS = "SELECT count(*) FROM metric_points WHERE sweep_id = %s AND name NOT LIKE 'sys/%%'"


def test_planner_and_collector_killed_mid_sweep_lose_and_duplicate_nothing(cluster: Cluster, database_url: str,
                                                                            rabbit_url: str) -> None:
    sweep_id = cluster.submit(spec("restarts", 12, 0.15, 3))
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "3", "--class", "cpu")
    done = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'completed'"
    assert wait_for(database_url, done, (sweep_id,), lambda n: n >= 2) >= 2, cluster.logs()
    cluster.kill9("planner")
    cluster.kill9("collector")
    # Trials keep running and reporting while both are down: once RabbitMQ has
    # seen the collector go (its unacked points are back in the queue), more arrive.
    assert wait_until(lambda: _queue(rabbit_url, COLLECTOR_QUEUE)[1] == 0)
    waiting = _queue(rabbit_url, COLLECTOR_QUEUE)[0]
    assert wait_until(lambda: _queue(rabbit_url, COLLECTOR_QUEUE)[0] > waiting), cluster.logs()
    cluster.start("planner2", "planner")
    cluster.start("collector2", "collector")
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running")
    assert state == "completed", cluster.logs()
    assert wait_for(database_url, POINTS, (sweep_id,), lambda n: n >= 60) == 60  # the collector's last batch
    codes = cluster.stop()
    assert all(codes[n] == 0 for n in ("planner2", "collector2", "agent")), (codes, cluster.logs())
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT params, metrics, state FROM trial_results WHERE sweep_id = %s", (sweep_id,)).fetchall()
        points = conn.execute(POINTS.replace("count(*)", "count(*), count(DISTINCT (trial_id, step))"),
                              (sweep_id,)).fetchone()
    assert len(rows) == 12 and all(r[2] == "completed" for r in rows)
    assert all(r[1]["loss"] == r[0]["k"] * 10 + 5 for r in rows)
    assert points == (60, 60)  # 12 trials x 5 steps, each stored exactly once


def test_cancel_stops_running_trials_and_ends_the_sweep(cluster: Cluster, database_url: str) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu")
    sweep_id = cluster.submit(spec("cancelme", 6, 20.0, 2))
    running = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'running'"
    assert wait_for(database_url, running, (sweep_id,), lambda n: n == 2) == 2, cluster.logs()
    proc = cluster.cli("cancel", sweep_id)
    assert proc.returncode == 0, proc.stderr
    finished = "SELECT count(*) FROM trial_events WHERE sweep_id = %s AND body->>'outcome' = 'cancelled'"
    # Within 30 s: the 100 s trials were stopped, not waited for.
    assert wait_for(database_url, finished, (sweep_id,), lambda n: n == 2, timeout=30) == 2, cluster.logs()
    with psycopg.connect(database_url) as conn:
        states = conn.execute("SELECT state, count(*) FROM trial_results WHERE sweep_id = %s GROUP BY state",
                              (sweep_id,)).fetchall()
        sweep = conn.execute("SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()[0]
    assert dict(states) == {"cancelled": 2} and sweep == "cancelled"
    status = cluster.cli("status", sweep_id, "--json")
    assert '"state": "cancelled"' in status.stdout
    assert cluster.stop()["agent"] == 0


def test_services_reconnect_when_the_broker_drops_every_connection(cluster: Cluster, database_url: str,
                                                                    rabbit_url: str) -> None:
    vhost = rabbit_url.rsplit("/", 1)[1]
    sweep_id = cluster.submit(spec("reconnect", 8, 0.2, 2))
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu")
    done = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'completed'"
    assert wait_for(database_url, done, (sweep_id,), lambda n: n >= 1) >= 1, cluster.logs()
    subprocess.run(["rabbitmqctl", "-q", "close_all_connections", "-p", vhost, "chaos test"], check=True, timeout=60)
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running")
    assert state == "completed", cluster.logs()
    assert wait_for(database_url, POINTS, (sweep_id,), lambda n: n >= 40) == 40  # the collector's last batch
    codes = cluster.stop()
    assert codes == {"planner": 0, "collector": 0, "agent": 0}, (codes, cluster.logs())
    assert "reconnecting" in cluster.logs()
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT params, metrics FROM trial_results WHERE sweep_id = %s AND state = 'completed'",
                            (sweep_id,)).fetchall()
        points = conn.execute("SELECT count(*), count(DISTINCT (trial_id, step)) FROM metric_points WHERE sweep_id = %s"
                              " AND name NOT LIKE 'sys/%%'",
                              (sweep_id,)).fetchone()
    assert len(rows) == 8 and all(r[1]["loss"] == r[0]["k"] * 10 + 5 for r in rows)
    assert points == (40, 40)
