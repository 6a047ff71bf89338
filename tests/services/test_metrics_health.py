"""``--metrics-port`` on real services (issue 20 section 3): what Prometheus and the kubelet see.

Planner, collector and agent run as processes over RabbitMQ, PostgreSQL and
moto's S3, each with its own metrics port. A sweep of two trials (each
reports points and saves a checkpoint) shows in the counters of the process
that did the work; ``/readyz`` is 200 while connected, 503 while a service
still waits for a dependency at start, and 503 once its database refuses
connections or its broker closes and refuses its connection, then 200
again when it is back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from tests.support.cluster import Cluster, wait_for
from tests.support.servers import free_port
from tests.support.vhosts import rabbitmqctl
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SCRIPT = """
from spotsweep import trial
for step in (1, 2, 3):
    trial.report(step, loss=1.0 / step)
(trial.checkpoint_dir / "w.txt").write_text("weights")
trial.checkpoint_saved(3)
"""


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``GET path``; (0, error) when nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def sample(text: str, name: str, labels: str = "") -> float | None:
    """A sample's value in Prometheus text, by name and exact label set (``state="completed"``)."""
    series = re.escape(name + (f"{{{labels}}}" if labels else ""))
    found = re.search(rf"^{series} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def _allow_connections(database_url: str, allowed: bool) -> None:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')


def test_the_services_count_a_sweep_and_say_they_are_ready(cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("planner", "collector", "agent")}
    cluster.start("planner", "planner", "--metrics-port", str(ports["planner"]))
    cluster.start("collector", "collector", "--metrics-port", str(ports["collector"]))
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "1", "--workdir", str(tmp_path / "work"),
                  env={"SPOTSWEEP_METRICS_PORT": str(ports["agent"])})  # the variable works as the flag does
    for name, port in ports.items():
        assert wait_until(lambda p=port: get(p, "/readyz")[0] == 200, timeout=60), (name, get(port, "/readyz"))
        assert get(port, "/healthz") == (200, "ok\n")
    sweep_id = cluster.submit({"name": "counted", "command": ["python", "-c", SCRIPT.replace("{", "{{").replace("}", "}}")],
                               "metric": {"name": "loss", "mode": "min"}, "space": {"x": [1, 2]},
                               "resources": {"gpus": 0, "class": "cpu"}})
    wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed")

    def scraped(name: str) -> str:
        status, text = get(ports[name], "/metrics")
        assert status == 200
        return text

    # The planner samples the database every few seconds: wait for the sample that saw the end.
    assert wait_until(lambda: sample(scraped("planner"), "spotsweep_trials_finished_total", 'state="completed"') == 2,
                      timeout=30), scraped("planner")
    planner = scraped("planner")
    assert sample(planner, "spotsweep_trials_dispatched_total") == 2
    assert sample(planner, "spotsweep_trials_in_flight") == 0
    assert sample(planner, "spotsweep_trials_finished_total", 'state="failed"') == 0
    assert wait_until(lambda: sample(scraped("planner"), "spotsweep_queue_depth", 'class="cpu"') == 0, timeout=30)
    assert "spotsweep_agent_slots" not in planner  # each process exports its own metrics only

    assert wait_until(lambda: sample(scraped("collector"), "spotsweep_points_ingested_total") == 6, timeout=30)
    assert (sample(scraped("collector"), "spotsweep_ingest_batch_seconds_count") or 0) >= 1

    agent = scraped("agent")
    assert sample(agent, "spotsweep_agent_slots") == 1
    assert sample(agent, "spotsweep_agent_slots_busy") == 0
    assert sample(agent, "spotsweep_agent_preemptions_total") == 0
    assert sample(agent, "spotsweep_checkpoint_upload_seconds_count") == 2
    assert sample(agent, "spotsweep_checkpoint_upload_bytes_total") == 2 * len("weights")
    assert sample(agent, "process_resident_memory_bytes")  # the process's own, from prometheus-client
    assert all(get(port, "/readyz")[0] == 200 for port in ports.values())

    # PostgreSQL refuses new connections: the collector is unready (alive, it reconnects), then ready again.
    _allow_connections(database_url, False)
    try:
        assert wait_until(lambda: get(ports["collector"], "/readyz")[0] == 503, timeout=30), get(ports["collector"], "/readyz")
        text = get(ports["collector"], "/readyz")[1]
        assert "postgresql: " in text and "rabbitmq: ok" in text, text
        assert get(ports["collector"], "/healthz")[0] == 200  # alive: a restart would not bring the database back
    finally:
        _allow_connections(database_url, True)
    assert wait_until(lambda: get(ports["collector"], "/readyz")[0] == 200, timeout=30), get(ports["collector"], "/readyz")


def test_a_service_waiting_for_its_database_is_unready_then_exits_69_naming_it(cluster: Cluster) -> None:
    """Nothing listens where the database should be: 503 while it retries, then one line and exit 69."""
    port, nowhere = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "planner", "--metrics-port", str(port),
                             "--startup-timeout", "4"], env={**cluster.env, "SPOTSWEEP_DATABASE_URL":
                            f"postgresql://postgres:s3cret@127.0.0.1:{nowhere}/db"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: list[tuple[int, str]] = []
    assert wait_until(lambda: seen.append(get(port, "/readyz")) or seen[-1][0] != 0 or proc.poll() is not None, timeout=30)
    assert seen[-1][0] == 503, seen[-1]
    assert get(port, "/healthz")[0] == 200
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 69, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: SPOTSWEEP_DATABASE_URL: PostgreSQL at postgresql://postgres:***@127.0.0.1:"), last
    assert "did not answer within 4 s" in last and "s3cret" not in out + err and "Traceback" not in err


def test_readiness_follows_the_broker(rabbit_url: str, tmp_path: Path) -> None:
    """RabbitMQ closes the agent's connection and refuses it back: unready; let back in, ready again."""
    vhost, port = rabbit_url.rsplit("/", 1)[1], free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPOTSWEEP_HOME": str(tmp_path / "home"),
           "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"]}
    agent = subprocess.Popen([sys.executable, "-m", "spotsweep", "agent", "--class", "cpu", "--workdir", str(tmp_path / "w"),
                              "--metrics-port", str(port)], env=env, stdout=subprocess.DEVNULL,
                             stderr=(tmp_path / "agent.log").open("wb"))
    try:
        assert wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=60), get(port, "/readyz")
        rabbitmqctl("clear_permissions", "-p", vhost, "guest")
        try:
            rabbitmqctl("close_all_connections", "-p", vhost, "test: the broker goes away")
            assert wait_until(lambda: get(port, "/readyz")[0] == 503, timeout=30), get(port, "/readyz")
            assert "rabbitmq: " in get(port, "/readyz")[1] and get(port, "/healthz")[0] == 200
        finally:
            rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        assert wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=60), get(port, "/readyz")
        assert agent.poll() is None  # it reconnected: losing the broker is no reason to exit
    finally:
        agent.terminate()
        agent.wait(30)
