"""Faults end to end, every service a separate process over real RabbitMQ,
PostgreSQL and S3 (moto): a preemption notice drains an agent and another
resumes the trial; a second SIGTERM stops a draining agent at once (137) and
its trial runs to the end elsewhere; a drain that cannot finish (S3 hung) is
cut off after --grace + --after-grace; a trial that keeps killing its agents
is dead-lettered and failed; RabbitMQ's consumer_timeout cutting a long
trial is named and cannot loop forever (on a private broker, where the
timeout can be set)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import psycopg
import pytest
from cluster import Cluster, descendants, wait_for  # tests/support
from metadata import FakeMetadata
from servers import MotoS3, PrivateRabbit

from spotsweep.shared.runtime import ExitCode

pytestmark = pytest.mark.integration
CHAOS_TRIAL = Path(__file__).parents[1] / "chaos" / "chaos_trial.py"
sys.path.insert(0, str(CHAOS_TRIAL.parent))
from chaos_trial import expected  # noqa: E402


def counting_spec(name: str, steps: int, pause: float, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", str(CHAOS_TRIAL), "--k", "{k}", "--steps", str(steps), "--pause", str(pause),
                    "--ckpt-every", "5"],
        "metric": {"name": "loss"},
        "space": {"k": [3]},
        "resources": {"gpus": 0, "class": "cpu"},
        **extra,
    }


def row(database_url: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, args).fetchone()


def test_a_preemption_notice_drains_the_agent_and_another_resumes_the_trial(cluster: Cluster, database_url: str) -> None:
    metadata = FakeMetadata()
    try:
        cluster.start("planner", "planner")
        cluster.start("collector", "collector")
        spot = cluster.start("spot", "agent", "--class", "cpu", "--preemption-notice", "aws", "--metadata-url",
                             metadata.url, "--notice-interval", "0.2")
        sweep_id = cluster.submit(counting_spec("notice", steps=40, pause=0.1))
        at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'loss'"
        assert (wait_for(database_url, at_step, (sweep_id,), lambda s: s >= 8) or 0) >= 8, cluster.logs()
        metadata.noticed = True  # AWS: "terminate in two minutes"
        assert spot.wait(30) == 0, cluster.logs()  # drained and left on its own, before any SIGTERM
        cluster.start("next", "agent", "--class", "cpu")
        state = wait_for(database_url, "SELECT state FROM trials WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed")
        assert state == "completed", cluster.logs()
    finally:
        metadata.close()
    r = row(database_url, "SELECT (metrics->>'loss')::float8, preemptions, failures, attempts FROM trial_results"
                          " WHERE sweep_id = %s", sweep_id)
    assert r == (expected(3, 40)[-1], 1, 0, 2)
    resumed = row(database_url, "SELECT (body->>'resume_step')::int FROM trial_events WHERE sweep_id = %s"
                                " AND kind = 'trial.started' AND attempt = 2", sweep_id)[0]
    assert resumed >= 8  # from the checkpoint taken on the notice, not from step 0
    assert "AWS spot interruption notice" in (cluster.tmp / "spot.log").read_text()


# A trial that ignores the drain's SIGTERM (as one stuck in a long step does):
# it notes the signal as a metric, then stops advancing until it is killed.
STUBBORN = """
import signal, time
from spotsweep import trial
print("training", flush=True)
termed = []
signal.signal(signal.SIGTERM, lambda *_: termed.append(1))
for step in range(1, 31):
    time.sleep(0.1)
    trial.report(step, loss=1.0 / step)
    if termed:
        trial.report(step, sigterm=1.0)
        while True:
            time.sleep(0.05)
"""


def stubborn_spec(tmp: Path) -> dict[str, Any]:
    script = tmp / "stubborn.py"
    script.write_text(STUBBORN)
    return {"name": "stubborn", "command": ["python", str(script)], "metric": {"name": "loss"}, "space": {"k": [1]},
            "resources": {"gpus": 0, "class": "cpu"}}


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def all_gone(pids: list[int], patience: float = 10.0) -> bool:
    """Whether the processes are gone, allowing the kernel a moment (far less than any grace here)."""
    deadline = time.monotonic() + patience
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(running(pid) for pid in pids)


def catches_sigterm(pid: int) -> bool:
    """Whether the process has installed a SIGTERM handler (SigCgt in /proc/PID/status)."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def trial_pids(agent_pid: int) -> list[int]:
    """The trial processes under an agent (their command names the stubborn script)."""
    out = []
    for pid in descendants(agent_pid):
        try:
            if b"stubborn.py" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def test_a_second_sigterm_stops_a_draining_agent_at_once_and_the_trial_completes_elsewhere(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    first = cluster.start("first", "agent", "--class", "cpu", "--grace", "300")
    sweep_id = cluster.submit(stubborn_spec(tmp_path))
    at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'loss'"
    assert (wait_for(database_url, at_step, (sweep_id,), lambda s: s >= 3) or 0) >= 3, cluster.logs()
    trials = trial_pids(first.pid)
    assert trials, cluster.logs()
    cluster.term("first")  # the node is going away: drain
    termed = "SELECT count(*) FROM metric_points WHERE sweep_id = %s AND name = 'sigterm'"
    assert wait_for(database_url, termed, (sweep_id,), lambda n: n >= 1) == 1, cluster.logs()
    assert first.poll() is None  # still draining: the trial ignores SIGTERM and the grace is 300 s
    cluster.term("first")  # the platform is out of patience
    assert first.wait(30) == ExitCode.KILLED, cluster.logs()
    assert all_gone(trials), trials  # killed with the agent, not left to run out its grace
    cluster.start("second", "agent", "--class", "cpu")
    state = wait_for(database_url, "SELECT state FROM trials WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed")
    assert state == "completed", cluster.logs()
    r = row(database_url, "SELECT (metrics->>'loss')::float8, attempts, preemptions, losses, failures FROM trial_results"
                          " WHERE sweep_id = %s", sweep_id)
    assert r == (1.0 / 30, 1, 0, 1, 0)  # the same attempt, redelivered: a loss, not a preemption or a failure


def test_a_drain_that_cannot_finish_is_cut_off_after_the_grace(rabbit_url: str, database_url: str, tmp_path: Path) -> None:
    s3 = MotoS3()  # a private one, to hang
    env = {**os.environ, "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_DATABASE_URL": database_url,
           "SPOTSWEEP_HOME": str(tmp_path / "home"), **s3.env("hang")}
    cluster = Cluster(env, tmp_path)
    try:
        cluster.start("planner", "planner")
        agent = cluster.start("agent", "agent", "--class", "cpu", "--grace", "1", "--after-grace", "2")
        sweep_id = cluster.submit(stubborn_spec(tmp_path))
        started = "SELECT state FROM trials WHERE sweep_id = %s"
        assert wait_for(database_url, started, (sweep_id,), lambda s: s == "running") == "running", cluster.logs()
        deadline = time.monotonic() + 30  # "running" comes before the script has set its handler
        while not any(catches_sigterm(pid) for pid in trial_pids(agent.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(catches_sigterm(pid) for pid in trial_pids(agent.pid)), cluster.logs()
        os.kill(s3.proc.pid, signal.SIGSTOP)  # S3 accepts connections and never answers: the log upload hangs
        cluster.term("agent")
        assert agent.wait(60) == ExitCode.KILLED, cluster.logs()  # not stuck for S3's minutes-long timeouts
        assert "--after-grace" in (tmp_path / "agent.log").read_text()
    finally:
        os.kill(s3.proc.pid, signal.SIGCONT)
        s3.stop()
        cluster.kill_all()


KILLER = "import os, signal, time\ntime.sleep(0.3)\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(30)"


def test_a_trial_that_keeps_killing_its_agents_is_dead_lettered_and_failed(cluster: Cluster, database_url: str,
                                                                          rabbit_url: str) -> None:
    spec = {
        "name": "poison",
        "command": ["python", "-c", "{script}"],
        "metric": {"name": "loss"},
        "space": {"script": [KILLER, "from spotsweep import trial; trial.report(1, loss=0.5)"]},
        "max_concurrent": 1,
        "retries": {"max_failures": 3, "max_lost": 2},
        "resources": {"gpus": 0, "class": "cpu"},
    }
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    sweep_id = cluster.submit(spec)
    for n in range(6):  # each agent the trial kills is replaced, as an autoscaler would
        agent = cluster.start(f"agent-{n}", "agent", "--class", "cpu")
        try:
            agent.wait(20)
        except Exception:  # noqa: BLE001 - still alive: the poison trial is gone
            break
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running")
    assert state == "completed", cluster.logs()
    poisoned = row(database_url, "SELECT state, error, failures FROM trial_results WHERE sweep_id = %s AND trial_id LIKE '%%.0'",
                   sweep_id)
    assert poisoned[0] == "failed" and "lost with its agent 3 times" in poisoned[1] and poisoned[2] == 1, cluster.logs()
    other = row(database_url, "SELECT state FROM trial_results WHERE sweep_id = %s AND trial_id LIKE '%%.1'", sweep_id)
    assert other == ("completed",)
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        method, props, body = conn.channel().basic_get("spotsweep.dead", auto_ack=True)
    finally:
        conn.close()
    assert method is not None and b'"kind":"trial"' in body  # kept for inspection, not retried
    assert "lost with its agent 3 times" in props.headers["x-spotsweep-error"]  # and says why


@pytest.fixture()
def private_rabbit(tmp_path: Path) -> Iterator[PrivateRabbit]:
    rabbit = PrivateRabbit(tmp_path / "rabbit")
    rabbit.start()
    yield rabbit
    rabbit.stop()


def test_rabbitmqs_consumer_timeout_is_named_and_cannot_loop_a_trial_forever(
        private_rabbit: PrivateRabbit, database_url: str, s3_env: dict[str, str], tmp_path: Path) -> None:
    private_rabbit.set_consumer_timeout(3000)  # RabbitMQ's default is 30 minutes; trials run for hours
    env = {**os.environ, "SPOTSWEEP_AMQP_URL": private_rabbit.url, "SPOTSWEEP_DATABASE_URL": database_url,
           "SPOTSWEEP_HOME": str(tmp_path / "home"), **s3_env}
    cluster = Cluster(env, tmp_path)
    try:
        cluster.start("planner", "planner")
        cluster.start("collector", "collector")
        cluster.start("agent", "agent", "--class", "cpu")
        sweep_id = cluster.submit(counting_spec("long", steps=300, pause=0.1, retries={"max_lost": 1}))
        state = wait_for(database_url, "SELECT state FROM trials WHERE sweep_id = %s", (sweep_id,),
                         lambda s: s == "failed", timeout=120)
        assert state == "failed", cluster.logs()
        lost = row(database_url, "SELECT body->>'reason' FROM trial_events WHERE sweep_id = %s AND kind = 'trial.lost'",
                   sweep_id)
        assert lost is not None and "consumer_timeout" in lost[0] and "deploy/rabbitmq.conf" in lost[0]
        error = row(database_url, "SELECT error FROM trial_results WHERE sweep_id = %s", sweep_id)[0]
        assert "lost with its agent 2 times" in error
        assert "consumer_timeout" in (tmp_path / "agent.log").read_text()
        steps = row(database_url, "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'loss'", sweep_id)[0]
        assert steps > 30  # each cut resumed from a checkpoint and got further
    finally:
        cluster.kill_all()
