"""The agent's trial handler called directly (in-memory broker, local artifact
store, real trial processes): lost deliveries counted and bounded, draining
agents hand trials back without a loss, a broken node stops taking trials for
a cooldown (but one broken sweep does not make a node broken), and the
planner's stop messages reach running trials."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from waiting import take
from spotsweep.services.agent.attempts import Attempts
from spotsweep.services.agent.handlers import Agent as AgentState, Connection, Slots, handle_control, handle_trial
from spotsweep.services.agent.health import Health
from spotsweep.services.agent.main import connect
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared import topology
from spotsweep.shared.artifacts.checkpoint_layout import loss_prefix
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.errors import DecodeError
from spotsweep.shared.messages import StopTrial, TrialFinished, TrialMessage, TrialStarted, decode, encode, unpack


class Agent:
    def __init__(self, tmp: Path, health: Health | None = None) -> None:
        self.broker = MemoryBroker()
        self.broker.declare(topology.service_queues(("cpu",)))
        self.events: queue.Queue[Any] = queue.Queue()
        every_event = self.broker.declare_private_queue([(topology.EVENTS_EXCHANGE, "#")])
        self.broker.consume(every_event, lambda d: ([self.events.put(e) for e in unpack(decode(d.body))], d.ack()), prefetch=100)
        self.store = LocalArtifactStore(tmp / "artifacts")
        self.deps = Connection(self.broker, AgentState(store=self.store, slots=Slots(1, None),
                                                  config=RunnerConfig(agent_id="a1", workdir=tmp / "work"),
                                                  health=health or Health()))

    def seen(self, kind: type, n: int = 1, timeout: float = 3.0) -> list[Any]:
        return take(self.events, kind, n, timeout)


def trial(index: int = 0, script: str = "print(1)", max_lost: int = 2, sweep: str = "sw") -> TrialMessage:
    return TrialMessage(sweep_id=sweep, trial_id=f"{sweep}.{index}", attempt=1, trial_name=f"t{index}", index=index, params={},
                        argv=["python", "-c", script], metric="loss", max_lost=max_lost, resource_class="cpu")


@pytest.fixture()
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def test_each_lost_delivery_is_counted_and_past_max_lost_the_trial_is_dead_lettered(agent: Agent, delivery: Any) -> None:
    msg = trial(max_lost=2)
    for losses in (1, 2):
        # Each delivery stands for a run lost with its agent: it comes to one that never ran the attempt.
        agent.deps.agent.attempts = Attempts()
        d = delivery(encode(msg), redelivered=True)
        handle_trial(d, agent.deps)
        assert d.settled == "ack"
        started = agent.seen(TrialStarted)
        assert started and started[0].redelivered and started[0].losses == losses
    assert len(agent.store.list(loss_prefix("sw", "sw.0", 1))) == 2
    agent.deps.agent.attempts = Attempts()
    d = delivery(encode(msg), redelivered=True)
    handle_trial(d, agent.deps)
    assert d.settled == "dead-letter"
    failed = [e for e in agent.seen(TrialFinished, n=3) if e.outcome == "failed"]
    assert len(failed) == 1 and failed[0].failure == "lost" and "max_lost=2" in failed[0].error
    assert agent.seen(TrialStarted, timeout=0.3) == []  # the third delivery never ran


def test_a_second_copy_of_an_attempt_this_agent_ran_is_dropped_unrun(agent: Agent, delivery: Any) -> None:
    """The planner republishes what a broker that lost its data forgot, and when in doubt a copy
    the queue still held: the copy of an attempt that ended here is acked, and nothing starts."""
    first = delivery(encode(trial()))
    handle_trial(first, agent.deps)
    assert first.settled == "ack" and len(agent.seen(TrialStarted)) == 1
    for redelivered in (False, True):
        copy = delivery(encode(trial()), redelivered=redelivered)
        handle_trial(copy, agent.deps)
        assert copy.settled == "ack"
    assert agent.seen(TrialStarted, timeout=0.5) == []  # never run again


def test_a_second_copy_of_an_attempt_this_agent_is_running_is_dropped_and_the_first_run_counts(
        tmp_path: Path, delivery: Any) -> None:
    agent = Agent(tmp_path)
    agent.deps.agent.slots = Slots(2, None)
    msg = trial(script="import time; time.sleep(1.5)")
    first = delivery(encode(msg))
    running = threading.Thread(target=handle_trial, args=(first, agent.deps))
    running.start()
    assert len(agent.seen(TrialStarted)) == 1
    copy = delivery(encode(msg))
    handle_trial(copy, agent.deps)
    assert copy.settled == "ack" and first.settled is None  # dropped while the first still runs
    running.join(10)
    finished = agent.seen(TrialFinished)
    assert first.settled == "ack" and [f.outcome for f in finished] == ["completed"]
    assert agent.seen(TrialStarted, timeout=0.3) == []


def test_a_copy_of_an_attempt_whose_connection_was_lost_runs_again(agent: Agent, delivery: Any) -> None:
    """A run lost with its connection is redelivered, maybe to this agent on its next connection."""
    lost = threading.Event()
    assert agent.deps.agent.attempts.claim(("sw.0", 1), lost) is None  # a run on an earlier connection
    lost.set()
    d = delivery(encode(trial()), redelivered=True)
    handle_trial(d, agent.deps)
    assert d.settled == "ack" and len(agent.seen(TrialStarted)) == 1


def test_a_fresh_delivery_counts_no_loss(agent: Agent, delivery: Any) -> None:
    handle_trial(delivery(encode(trial())), agent.deps)
    assert agent.store.list(loss_prefix("sw", "sw.0", 1)) == []
    assert agent.seen(TrialStarted)[0].losses == 0


def test_a_draining_agent_hands_the_trial_back_without_it_looking_lost(agent: Agent, delivery: Any) -> None:
    back: queue.Queue[Any] = queue.Queue()
    agent.broker.consume(topology.trials_queue("cpu"), lambda d: (back.put(d), d.ack()), prefetch=10)
    agent.deps.agent.preempt.set()
    d = delivery(encode(trial()), headers={"sweep_id": "sw"}, message_id="sw.0#1")
    handle_trial(d, agent.deps)
    assert d.settled == "ack"
    again = back.get(timeout=2)
    assert decode(again.body) == decode(d.body) and not again.redelivered and again.message_id == "sw.0#1"
    assert agent.seen(TrialStarted, timeout=0.3) == []


NO_GPU = "raise SystemExit('no CUDA-capable device is detected')"
LOST = "GPU 0 cannot be read by NVML: GPU is lost"  # what the agent sees of a broken node (health.Observer)


def test_a_node_that_fails_every_trial_stops_taking_them(tmp_path: Path, delivery: Any) -> None:
    agent = Agent(tmp_path, Health(limit=2, observe=lambda: LOST))
    agent.deps.trials_consumer = agent.broker.consume(topology.trials_queue("cpu"), lambda d: None)
    for i, sweep in enumerate(("sw", "other")):  # trials of two sweeps: the node, not a sweep, is broken
        handle_trial(delivery(encode(trial(i, NO_GPU, sweep=sweep))), agent.deps)
    assert agent.deps.agent.health.tripped and agent.deps.trials_consumer.cancelled  # type: ignore[attr-defined]
    d = delivery(encode(trial(5)))
    back: queue.Queue[Any] = queue.Queue()
    agent.broker.consume(topology.trials_queue("cpu"), lambda x: (back.put(x), x.ack()), prefetch=10)
    handle_trial(d, agent.deps)  # one already buffered goes back, not run here
    assert d.settled == "ack" and decode(back.get(timeout=2).body).trial_id == "sw.5"


def test_one_sweep_whose_script_fails_everywhere_does_not_stop_the_agent(tmp_path: Path, delivery: Any) -> None:
    agent = Agent(tmp_path, Health(limit=2))
    agent.deps.trials_consumer = agent.broker.consume(topology.trials_queue("cpu"), lambda d: None)
    for i in range(4):
        handle_trial(delivery(encode(trial(i, "import nosuchmodule", sweep="broken"))), agent.deps)
    assert not agent.deps.trials_consumer.cancelled  # type: ignore[attr-defined]
    d = delivery(encode(trial(9, "print('fine')", sweep="good")))
    handle_trial(d, agent.deps)
    finished = [e for e in agent.seen(TrialFinished, n=5) if e.trial_id == "good.9"]
    assert d.settled == "ack" and [e.outcome for e in finished] == ["completed"]


def test_a_tripped_agent_takes_trials_again_after_its_cooldown(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    deps = connect(agent.broker, AgentState(store=agent.store, config=RunnerConfig(agent_id="a1", workdir=tmp_path / "work"),
                                       slots=Slots(1, None), health=Health(limit=2, cooldown=0.5, observe=lambda: LOST)), "cpu")

    def submit(msg: TrialMessage) -> None:
        agent.broker.publish(Outgoing(topology.TRIALS_EXCHANGE, "cpu", encode(msg), message_id=msg.trial_id))

    submit(trial(0, NO_GPU, sweep="a"))
    submit(trial(1, NO_GPU, sweep="b"))
    assert len(agent.seen(TrialFinished, n=2)) == 2
    first = deps.trials_consumer
    assert first is not None and first.cancelled  # type: ignore[attr-defined]
    submit(trial(2, "print('fine')", sweep="c"))  # waits in the queue for the cooldown, then runs here
    finished = agent.seen(TrialFinished, timeout=30)
    assert [(e.trial_id, e.outcome) for e in finished] == [("c.2", "completed")]
    assert deps.trials_consumer is not first and not deps.agent.health.tripped
    deps.agent.preempt.set()
    agent.broker.stop()


def test_stop_messages_reach_the_runs_they_name(agent: Agent, delivery: Any) -> None:
    stop = StopTrial(sweep_id="sw", trial_id="sw.0", attempt=1, run_id="r1", reason="duplicate")
    handle_control(delivery(encode(stop)), agent.deps)
    assert agent.deps.agent.stop_reason("r1") == "duplicate" and agent.deps.agent.stop_reason("r2") is None


def test_a_message_of_another_kind_on_the_control_queue_is_refused_not_run(agent: Agent, delivery: Any) -> None:
    """Only cancels and stops are controls: a trial posted to the control exchange never runs there."""
    trial = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                         argv=["true"], metric="loss", resource_class="gpu")
    with pytest.raises(DecodeError, match="expected a control message .* got trial"):
        handle_control(delivery(encode(trial)), agent.deps)


def test_a_draining_agent_acks_its_last_trial_before_the_handler_returns(agent: Agent, delivery: Any) -> None:
    """Draining, the connection closes soon after the last handler returns: a
    preempted trial's handler waits for its final event's confirm and acks,
    so that ack is never left to a connection about to close."""
    slow: Future[None] = Future()
    publish = agent.broker.publish_async

    def publish_async(messages: Any) -> Any:
        if any(decode(m.body).kind == "trial.finished" for m in messages):
            publish(messages)
            threading.Timer(0.5, slow.set_result, args=(None,)).start()  # a broker slow to confirm
            return slow
        return publish(messages)

    agent.broker.publish_async = publish_async  # type: ignore[method-assign]
    threading.Timer(0.3, agent.deps.agent.preempt.set).start()  # the node's notice, mid-trial
    d = delivery(encode(trial(script="import time; time.sleep(5)")))
    handle_trial(d, agent.deps)
    assert slow.done() and d.settled == "ack"
    assert agent.seen(TrialFinished)[0].outcome == "preempted"
