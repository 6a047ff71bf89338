"""One RabbitMQ user per role, from deploy/rabbitmq/definitions.json, against the real broker (issue 19 sections 2, 3).

The file is loaded into a vhost of its own with ``rabbitmqctl import_definitions``
(its vhost and user names made unique to the test): each user does its job
and is refused the others' (403 ACCESS_REFUSED); a faked ``user_id`` is
refused by RabbitMQ (406 PRECONDITION_FAILED); a trial published by a user
with every permission who is not the planner (the admin ``guest``) is
dead-lettered by the agent and never runs; and the whole pipeline (planner,
collector, agent processes, ``submit``) runs a sweep with these users.
The ``users`` and ``opened`` fixtures are in this folder's conftest.py.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster import Cluster, wait_for
from spotsweep.services.agent.handlers import Agent as AgentState, Slots
from spotsweep.services.agent.main import connect
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.dispatch import REASON_HEADER
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.messages import TrialFinished, TrialMessage, decode, encode, unpack
from waiting import take

pytestmark = [pytest.mark.needs_rabbit, pytest.mark.timeout(240)]


def running(url: str, opened: list[Broker]) -> RabbitBroker:
    broker = RabbitBroker(url)
    threading.Thread(target=broker.run, daemon=True).start()
    opened.append(broker)
    return broker


def refused(broker: Broker, message: Outgoing, code: str = "403") -> None:
    with pytest.raises(PermanentError, match=code):
        broker.publish(message)


def trial(script: str = "print(1)", sweep: str = "sw") -> TrialMessage:
    return TrialMessage(sweep_id=sweep, trial_id=f"{sweep}.0", attempt=1, trial_name="t0", index=0, params={},
                        argv=[sys.executable, "-c", script], metric="loss", resource_class="gpu")


def to_trials(msg: TrialMessage, **kw: Any) -> Outgoing:
    return Outgoing(topology.TRIALS_EXCHANGE, msg.resource_class, encode(msg), message_id=msg.trial_id, **kw)


def test_each_user_does_its_job_and_is_refused_the_others(users: dict[str, str], opened: list[Broker]) -> None:
    names = json.loads(users["_names"])
    planner = running(users["planner"], opened)
    planner.declare(topology.service_queues(("gpu", "cpu")))  # the planner owns the topology
    planner.publish(to_trials(trial()))
    planner.publish(Outgoing(topology.CONTROL_EXCHANGE, "", b"{}"))

    submitter = running(users["submitter"], opened)
    submitter.declare([topology.dead_letter_queue(), topology.sweeps_queue()])  # checked, not declared: no 403
    submitter.publish(Outgoing("", topology.SWEEPS_QUEUE, b"{}", message_id="s1"))  # its one job
    refused(submitter, to_trials(trial()))
    refused(submitter, Outgoing(topology.CONTROL_EXCHANGE, "", b"{}"))
    refused(submitter, Outgoing(topology.EVENTS_EXCHANGE, "trial.finished.sw", b"{}"))
    refused(submitter, Outgoing("", topology.SWEEPS_QUEUE, b"{}", user_id=names["planner"]), "406")
    with pytest.raises(PermanentError, match="403"):
        submitter.consume(topology.SWEEPS_QUEUE, lambda d: None)

    agent = running(users["agent"], opened)
    agent.declare([topology.dead_letter_queue(), topology.trial_queue_spec("gpu")])
    agent.declare_private_queue([(topology.CONTROL_EXCHANGE, "")])
    agent.consume(topology.trials_queue("gpu"), lambda d: None)
    agent.publish(Outgoing(topology.EVENTS_EXCHANGE, "trial.started.sw", b"{}"))
    refused(agent, to_trials(trial()))  # agents cannot post a trial...
    refused(agent, Outgoing("", topology.SWEEPS_QUEUE, b"{}"))  # ...nor a sweep...
    refused(agent, Outgoing(topology.CONTROL_EXCHANGE, "", b"{}"))  # ...nor a control message
    refused(agent, Outgoing(topology.EVENTS_EXCHANGE, "x", b"{}", user_id=names["planner"]), "406")
    for queue_name in (topology.SWEEPS_QUEUE, topology.COLLECTOR_QUEUE, topology.PLANNER_EVENTS_QUEUE):
        with pytest.raises(PermanentError, match="403"):
            agent.consume(queue_name, lambda d: None)

    collector = running(users["collector"], opened)
    collector.declare(topology.service_queues())
    collector.consume(topology.COLLECTOR_QUEUE, lambda d: None)
    refused(collector, to_trials(trial()))
    refused(collector, Outgoing("", topology.SWEEPS_QUEUE, b"{}"))
    with pytest.raises(PermanentError, match="403"):
        collector.consume(topology.SWEEPS_QUEUE, lambda d: None)

    keda = running(users["keda"], opened)  # KEDA's scaler reads queue lengths over the management API, nothing else
    for message in (to_trials(trial()), Outgoing("", topology.SWEEPS_QUEUE, b"{}"),
                    Outgoing(topology.EVENTS_EXCHANGE, "trial.started.sw", b"{}")):
        refused(keda, message)
    for queue_name in (topology.trials_queue("gpu"), topology.SWEEPS_QUEUE, topology.COLLECTOR_QUEUE):
        with pytest.raises(PermanentError, match="403"):
            keda.consume(queue_name, lambda d: None)


def test_the_agent_dead_letters_a_trial_from_any_user_but_the_planner(users: dict[str, str], opened: list[Broker],
                                                                      tmp_path: Path) -> None:
    names = json.loads(users["_names"])
    planner = running(users["planner"], opened)
    planner.declare(topology.service_queues(("gpu",)))
    admin = running(users["admin"], opened)  # every permission, but not the planner
    events: queue.Queue[Any] = queue.Queue()
    every_event = admin.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
    admin.consume(every_event, lambda d: ([events.put(e) for e in unpack(decode(d.body))], d.ack()), prefetch=100)
    dead: queue.Queue[Delivery] = queue.Queue()
    planner.consume(topology.DEAD_LETTER_QUEUE, lambda d: (d.ack(), dead.put(d)))

    node = running(users["agent"], opened)
    state = AgentState(store=LocalArtifactStore(tmp_path / "artifacts"), slots=Slots(1, None),
                       config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work"))
    connect(node, state, "gpu", accept_users={names["planner"]}, own_user=names["agent"])

    pwned = tmp_path / "pwned"
    admin.publish(to_trials(trial(f"open({str(pwned)!r}, 'w')", sweep="evil")))
    d = dead.get(timeout=30)
    assert decode(d.body).trial_id == "evil.0" and "'guest'" in d.headers[REASON_HEADER]
    planner.publish(to_trials(trial("print('fine')", sweep="good")))
    finished = take(events, TrialFinished, 1, 60)
    assert [(e.trial_id, e.outcome) for e in finished] == [("good.0", "completed")]
    assert not pwned.exists()
    state.preempt.set()


SPEC: dict[str, Any] = {
    "name": "roles",
    "command": ["python", "-c", "from spotsweep import trial; trial.report(1, loss=trial.params['x'])"],
    "metric": {"name": "loss", "mode": "min"},
    "space": {"x": [1, 2]},
    "resources": {"gpus": 0, "class": "cpu"},
}


def test_the_whole_pipeline_runs_with_one_user_per_role(users: dict[str, str], database_url: str,
                                                       s3_env: dict[str, str], tmp_path: Path) -> None:
    names = json.loads(users["_names"])
    base = {**os.environ, "SPOTSWEEP_DATABASE_URL": database_url, "SPOTSWEEP_HOME": str(tmp_path / "home"), **s3_env}
    cluster = Cluster({**base, "SPOTSWEEP_AMQP_URL": users["submitter"]}, tmp_path)
    try:
        cluster.start("planner", "planner", env={"SPOTSWEEP_AMQP_URL": users["planner"],
                                                 "SPOTSWEEP_SUBMITTERS": names["submitter"]})
        cluster.start("collector", "collector", env={"SPOTSWEEP_AMQP_URL": users["collector"]})
        cluster.start("agent", "agent", "--class", "cpu", "--workdir", str(tmp_path / "w"),
                      env={"SPOTSWEEP_AMQP_URL": users["agent"], "SPOTSWEEP_PLANNER_USER": names["planner"]})
        spec = tmp_path / "roles.yaml"
        spec.write_text(yaml.safe_dump(SPEC))
        done = cluster.cli("submit", str(spec), "--wait", "--timeout", "120")
        assert done.returncode == 0, done.stderr + cluster.logs()
        sweep_id = done.stdout.strip().splitlines()[-1]
        state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,),
                         lambda s: s == "completed", timeout=60)
        assert state == "completed", cluster.logs()
        points = wait_for(database_url, "SELECT count(*) FROM metric_points WHERE sweep_id = %s", (sweep_id,),
                          lambda n: n == 2, timeout=60)
        assert points == 2, cluster.logs()  # the collector wrote them with its own user
    finally:
        cluster.kill_all()
