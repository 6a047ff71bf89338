"""An agent runs only what the planner's broker user sent (issue 19 section 2).

Over the in-memory broker, whose connections log in as users and carry a
validated user_id as RabbitMQ's do: a trial and a cancel published by
another user are dead-lettered with the reason, never run, never stop the
planner's running trial, and the agent goes on. The same over real RabbitMQ
users and agent processes: tests/security/test_broker_users.py.
"""

from __future__ import annotations

import queue
import sys
from pathlib import Path
from typing import Any

import pytest
from waiting import take

from spotsweep.services.agent.handlers import Agent as AgentState, Slots
from spotsweep.services.agent.insecure import planner_users
from spotsweep.services.agent.main import connect
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.dispatch import REASON_HEADER
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.broker.port import Delivery, Outgoing
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.messages import CancelSweep, TrialFinished, TrialMessage, TrialStarted, decode, encode, unpack
from spotsweep.shared.settings import AgentSettings

pytestmark = pytest.mark.timeout(60)


def trial(sweep: str, script: str) -> TrialMessage:
    return TrialMessage(sweep_id=sweep, trial_id=f"{sweep}.0", attempt=1, trial_name="t0", index=0, params={},
                        argv=[sys.executable, "-c", script], metric="loss", resource_class="cpu")


def send_trial(broker: MemoryBroker, msg: TrialMessage) -> None:
    broker.publish(Outgoing(topology.TRIALS_EXCHANGE, "cpu", encode(msg), message_id=f"{msg.trial_id}#1"))


def test_a_forged_trial_and_cancel_never_run_and_never_stop_the_planners_trial(tmp_path: Path) -> None:
    planner = MemoryBroker(user="planner")
    planner.declare(topology.service_queues(("cpu",)))
    mallory = MemoryBroker(planner.server, user="mallory")
    node = MemoryBroker(planner.server, user="agent")
    events: queue.Queue[Any] = queue.Queue()
    every_event = planner.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
    planner.consume(every_event, lambda d: ([events.put(e) for e in unpack(decode(d.body))], d.ack()), prefetch=100)
    dead: queue.Queue[Delivery] = queue.Queue()
    planner.consume(topology.DEAD_LETTER_QUEUE, lambda d: (d.ack(), dead.put(d)))
    state = AgentState(store=LocalArtifactStore(tmp_path / "artifacts"), slots=Slots(2, None),
                       config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work"))
    connect(node, state, "cpu", accept_users={"planner"})

    go = tmp_path / "go"
    send_trial(planner, trial("good", f"import pathlib, time\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)"))
    assert [e.trial_id for e in take(events, TrialStarted, 1, 20)] == ["good.0"]

    pwned = tmp_path / "pwned"
    send_trial(mallory, trial("evil", f"open({str(pwned)!r}, 'w')"))
    mallory.publish(Outgoing(topology.CONTROL_EXCHANGE, "", encode(CancelSweep(sweep_id="good"))))
    refused = [dead.get(timeout=20), dead.get(timeout=20)]
    assert sorted(decode(d.body).kind for d in refused) == ["sweep.cancel", "trial"]
    for d in refused:
        assert "'mallory'" in d.headers[REASON_HEADER] and "'planner'" in d.headers[REASON_HEADER]

    go.write_text("")
    finished = take(events, TrialFinished, 1, 20)
    assert [(e.trial_id, e.outcome) for e in finished] == [("good.0", "completed")]  # the forged cancel stopped nothing
    assert not pwned.exists()
    assert take(events, TrialStarted, 1, 0.3) == []  # the forged trial never started

    with pytest.raises(PermanentError, match="406"):  # nor can mallory pass for the planner
        mallory.publish(Outgoing(topology.TRIALS_EXCHANGE, "cpu", b"{}", user_id="planner"))
    state.preempt.set()
    for b in (node, mallory, planner):
        b.stop(drain=False)


def test_the_planner_user_is_the_setting_else_the_agents_own_broker_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTSWEEP_PLANNER_USER", raising=False)
    monkeypatch.setenv("SPOTSWEEP_AMQP_URL", "amqp://gpu%2Dnode:s3cret@broker:5672/%2F")
    assert planner_users(AgentSettings()) == {"gpu-node"}  # one user for everything keeps working
    monkeypatch.setenv("SPOTSWEEP_AMQP_URL", "amqp://broker:5672/%2F")
    assert planner_users(AgentSettings()) == {"guest"}  # RabbitMQ's default user, as pika logs in
    monkeypatch.setenv("SPOTSWEEP_PLANNER_USER", "spotsweep-planner")
    assert planner_users(AgentSettings()) == {"spotsweep-planner"}


def test_with_users_per_role_a_draining_agent_requeues_the_planners_trial_unchanged(tmp_path: Path) -> None:
    """A republished trial would carry the agent's user_id, which every other agent refuses: with its
    own user not accepted, an agent hands a trial back by requeueing it, the planner's user_id intact."""
    planner = MemoryBroker(user="planner")
    planner.declare(topology.service_queues(("cpu",)))
    node = MemoryBroker(planner.server, user="agent")
    state = AgentState(store=LocalArtifactStore(tmp_path / "artifacts"), slots=Slots(1, None),
                       config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work"))
    state.preempt.set()  # draining: every trial goes back
    conn = connect(node, state, "cpu", accept_users={"planner"}, own_user="agent")
    assert not conn.republish
    send_trial(planner, trial("good", "print(1)"))
    assert conn.trials_consumer is not None
    conn.trials_consumer.cancel()  # the trial went back once; the next consumer takes it
    back: queue.Queue[Delivery] = queue.Queue()
    other = MemoryBroker(planner.server, user="agent")
    other.consume(topology.trials_queue("cpu"), lambda d: (back.put(d), d.ack()), accept_users={"planner"})
    d = back.get(timeout=20)
    assert (decode(d.body).trial_id, d.user_id) == ("good.0", "planner")  # still the planner's, so it runs
    for b in (node, other, planner):
        b.stop(drain=False)
