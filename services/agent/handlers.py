"""Agent handlers: a trial delivery runs to its end, then is acked.

The ack comes only after the attempt's final event is confirmed by the
broker, so a node that dies at any point before leaves the trial unacked and
RabbitMQ hands it to another agent, which resumes from the last uploaded
checkpoint. On a hard stop (second SIGTERM) the handler neither publishes nor
acks: the closing connection puts the trial back.

A delivery that comes back ``redelivered`` was lost with its previous holder
(kill -9, a node gone, a broker restart, RabbitMQ's consumer_timeout). Each
such loss is counted in the artifact store; past the spec's
``retries.max_lost`` the attempt is reported failed and dead-lettered, so a
trial that takes its agents down cannot circle forever. The agent never hands
a trial back with a requeue (which would look like a loss): a draining agent,
or one whose node looks broken, republishes it with a confirm, then acks.
That includes deliveries prefetched but not yet started when the trials
consumer is cancelled: the consumer passes them to this handler (see
:func:`~.main.consume_trials`), which hands them back the same way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spotsweep.services.agent import uploads
from spotsweep.services.agent.health import Health
from spotsweep.services.agent.runner import DeliveryLost, RunControl, RunnerConfig, run_trial
from spotsweep.services.agent.workspace import remove_own, remove_stale
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.broker.port import Broker, Consumer, Delivery, Outgoing
from spotsweep.shared.errors import DecodeError, RetryableError
from spotsweep.shared.messages import (
    CancelSweep, Envelope, StopTrial, TrialFinished, TrialLost, TrialMessage, decode, encode,
)

_log = log.get("spotsweep.agent")
MAX_STOPS = 10_000


class Slots:
    """Slot ids handed to trials; each slot is one GPU when the node has GPUs."""

    def __init__(self, n: int, gpus: list[str] | None) -> None:
        self.count = n
        self._workdirs: set[Path] = set()
        self._free: queue.Queue[tuple[int, str | None]] = queue.Queue()
        for i in range(n):
            # More slots than GPUs share them round-robin (small models); never
            # leave CUDA_VISIBLE_DEVICES unset on a GPU node, or a trial sees all.
            self._free.put((i, gpus[i % len(gpus)] if gpus else None))

    @contextmanager
    def take(self) -> Iterator[tuple[int, str | None]]:
        slot = self._free.get()
        try:
            yield slot
        finally:
            self._free.put(slot)

    def use_workdir(self, parent: Path) -> None:
        """Runs make their trees under ``parent``: clear what agents killed outright left there (once)."""
        if parent not in self._workdirs:
            self._workdirs.add(parent)
            remove_stale(parent)

    def remove_workspaces(self) -> None:
        """Delete what this agent's runs left (the agent is exiting: a run stopped hard may not have)."""
        for parent in list(self._workdirs):
            remove_own(parent)


@dataclass
class AgentState:
    """What outlives one broker connection: signals, node health, notes to send."""

    control: RunControl = field(default_factory=RunControl)
    health: Health = field(default_factory=Health)
    # Lost runs to report once connected again: the event, and the reason its
    # connection ended (known for certain only once that connection's cleanup ran).
    notices: list[tuple[TrialLost, Callable[[], str]]] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)  # sweep ids
    stops: dict[str, str] = field(default_factory=dict)  # run id -> the planner's reason to stop it
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class AgentDeps:
    broker: Broker
    store: ArtifactStore
    config: RunnerConfig
    slots: Slots
    state: AgentState = field(default_factory=AgentState)
    lost: threading.Event = field(default_factory=threading.Event)  # set when this connection is gone
    lost_reason: str = "the connection to RabbitMQ was lost"
    trials_consumer: Consumer | None = None
    resume: Callable[[], object] | None = None  # subscribe to the trials queue again (set by main.start)
    _busy: int = 0  # trial handlers running on this connection
    _idle: threading.Condition = field(default_factory=threading.Condition)

    @contextmanager
    def busy(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no trial handler of this connection runs (True) or ``timeout`` passes."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    @property
    def control(self) -> RunControl:
        return self.state.control

    def publish_event(self, event: Envelope) -> None:
        """Publish and wait for the broker's confirm."""
        self.broker.publish(_outgoing(event))

    def send_event(self, event: Envelope) -> Future[None]:
        """Publish without waiting: the runner waits for these confirms only where
        it must (before a checkpoint is committed, and before the delivery is acked)."""
        return self.broker.publish_async([_outgoing(event)])

    def is_cancelled(self, sweep_id: str) -> bool:
        with self.state.lock:
            return sweep_id in self.state.cancelled

    def stop_reason(self, run_id: str) -> str | None:
        with self.state.lock:
            return self.state.stops.get(run_id)


def _outgoing(event: Envelope) -> Outgoing:
    kind = getattr(event, "kind", "event")
    return Outgoing(topology.EVENTS_EXCHANGE, topology.event_routing_key(kind, event.sweep_id), encode(event),
                    headers={"sweep_id": event.sweep_id, "trial_id": event.trial_id, "attempt": event.attempt},
                    message_id=event.message_id)


def _hand_back(delivery: Delivery, msg: TrialMessage, deps: AgentDeps) -> None:
    """Put a trial we will not run back on its queue without it counting as a loss."""
    deps.broker.publish(Outgoing(topology.TRIALS_EXCHANGE, msg.resource_class, delivery.body, headers=dict(delivery.headers),
                                 message_id=delivery.message_id, priority=delivery.priority))
    delivery.ack()


def handle_trial(delivery: Delivery, deps: AgentDeps) -> None:
    with deps.busy():
        _handle_trial(delivery, deps)


def _handle_trial(delivery: Delivery, deps: AgentDeps) -> None:
    msg = decode(delivery.body)
    if not isinstance(msg, TrialMessage):
        raise DecodeError(f"expected a trial message on the trials queue, got {getattr(msg, 'kind', '?')}")
    with log.bound(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt):
        if deps.control.preempt.is_set() or deps.state.health.tripped:
            # Draining (the node is going away) or a broken node: do not start
            # it here; another agent takes it.
            _hand_back(delivery, msg, deps)
            return
        losses = uploads.record_loss(deps.store, msg) if delivery.redelivered else 0
        if losses > msg.max_lost:
            _dead_letter(delivery, msg, deps, losses)
            return
        final = _run(delivery, msg, deps, losses)
        if final is None:  # the planner stopped this run: another one counts
            delivery.ack()
            return
        if deps.control.kill.is_set():
            _log.warning("hard stop: trial left unacked for redelivery")
            return
        if deps.state.health.record(final):
            # Stop the consumer before the ack: the ack frees a prefetch slot,
            # and a trial the broker put there would only be handed back.
            _trip(deps)
        # The ack follows the final event's confirm, sent by whichever thread
        # sees the confirm (the broker's I/O thread): this worker takes its
        # next trial meanwhile instead of waiting a broker round trip.
        sent = deps.send_event(final)
        if deps.control.preempt.is_set():
            # Draining: the connection closes a few seconds after the last
            # handler returns (DRAIN_GRACE_S); wait here, so that a slow
            # confirm has all of --after-grace, as before the drain ends.
            wait([sent])
        sent.add_done_callback(lambda done: _settle(delivery, done))


def _settle(delivery: Delivery, sent: Future[None]) -> None:
    """Ack a finished trial once its final event is confirmed; put it back if that failed."""
    error = sent.exception()
    if error is None:
        delivery.ack()
        return
    # Not reported: the trial runs again elsewhere (as when the agent dies
    # here); the planner fences off the second run of an attempt it has decided.
    _log.error("final event not confirmed: trial requeued", error=str(error))
    try:
        delivery.nack(requeue=True)
    except RetryableError:
        pass  # the connection is gone: the broker requeues it anyway


def _run(delivery: Delivery, msg: TrialMessage, deps: AgentDeps, losses: int) -> TrialFinished | None:
    if deps.is_cancelled(msg.sweep_id):
        return _failed(msg, deps, "sweep cancelled", outcome="cancelled")
    with deps.slots.take() as (slot, gpu):
        control = RunControl(
            preempt=deps.control.preempt, kill=deps.control.kill, lost=deps.lost, grace=deps.control.grace,
            cancelled=lambda: deps.is_cancelled(msg.sweep_id), stopped=deps.stop_reason,
        )
        try:
            return run_trial(msg, deps.store, deps.send_event, deps.config, control, gpu,
                             redelivered=delivery.redelivered, losses=losses)
        except DeliveryLost as e:
            notice = TrialLost(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                               agent=deps.config.agent_id, run_id=e.run_id, reason="", duration=e.duration)
            with deps.state.lock:
                deps.state.notices.append((notice, lambda: deps.lost_reason))
            raise
        except RetryableError:
            raise  # the broker or S3 is away: no report, the trial is redelivered
        except Exception as e:
            # The agent itself broke on this trial (a full disk, a bad
            # checkpoint pointer): report a failed attempt so the planner
            # retries or fails it, instead of losing it.
            _log.exception("agent error while running the trial")
            return _failed(msg, deps, f"agent {deps.config.agent_id} error: {type(e).__name__}: {e}", failure="agent")


def _dead_letter(delivery: Delivery, msg: TrialMessage, deps: AgentDeps, losses: int) -> None:
    error = (f"lost with its agent {losses} times (retries.max_lost={msg.max_lost}): the trial may be taking its "
             "agents down (host OOM, a driver crash), or nodes vanish without notice; dead-lettered to "
             f"{topology.DEAD_LETTER_QUEUE}")
    _log.error("trial dead-lettered", losses=losses, max_lost=msg.max_lost)
    deps.publish_event(_failed(msg, deps, error, failure="lost"))
    delivery.nack(requeue=False)


def _trip(deps: AgentDeps) -> None:
    """The node looks broken: stop taking trials for the cooldown (running ones go on), say so, try again after."""
    health = deps.state.health
    _log.error(f"agent stops taking trials for {health.cooldown:g} s: recent trials of several sweeps all failed "
               "on this node (a broken GPU, driver or disk?); it takes trials again after that, and stops again at the "
               "next failure if the node is still broken", agent=deps.config.agent_id, detail=health.summary())
    if deps.trials_consumer is not None:
        try:
            deps.trials_consumer.cancel()
        except RetryableError:
            pass  # the connection is gone; start() will not consume again either
    resume_after_cooldown(deps)


def resume_after_cooldown(deps: AgentDeps) -> None:
    """Subscribe to the trials queue again once the breaker's cooldown is over."""
    timer = threading.Timer(deps.state.health.remaining(), _resume, args=(deps,))
    timer.daemon = True
    timer.start()


def _resume(deps: AgentDeps) -> None:
    if deps.lost.is_set() or deps.control.preempt.is_set() or deps.control.kill.is_set() or deps.resume is None:
        return  # a new connection's start() decides; a draining agent takes nothing more
    if deps.state.health.tripped:  # a clock that woke a little early
        resume_after_cooldown(deps)
        return
    _log.warning("breaker cooldown over: taking trials again", agent=deps.config.agent_id)
    try:
        deps.resume()
    except RetryableError:
        pass  # the connection is gone: the next connection's start() consumes


def _failed(msg: TrialMessage, deps: AgentDeps, error: str, outcome: str = "failed", failure: str | None = None) -> TrialFinished:
    return TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, outcome=outcome,  # type: ignore[arg-type]
                         error=error, agent=deps.config.agent_id, failure=failure)  # type: ignore[arg-type]


def handle_control(delivery: Delivery, deps: AgentDeps) -> None:
    msg = decode(delivery.body)
    if isinstance(msg, CancelSweep):
        with deps.state.lock:
            deps.state.cancelled.add(msg.sweep_id)
        _log.info("sweep cancelled: its trials on this agent stop", sweep_id=msg.sweep_id)
    elif isinstance(msg, StopTrial):
        with deps.state.lock:
            deps.state.stops[msg.run_id] = msg.reason
            while len(deps.state.stops) > MAX_STOPS:  # run ids are never reused: forget the oldest
                del deps.state.stops[next(iter(deps.state.stops))]
    delivery.ack()


def send_notices(deps: AgentDeps) -> None:
    """Report runs lost with an earlier connection (once this one is up)."""
    with deps.state.lock:
        notices, deps.state.notices = deps.state.notices, []
    for i, (notice, reason) in enumerate(notices):
        try:
            deps.publish_event(notice.model_copy(update={"reason": reason()}))
        except RetryableError:
            with deps.state.lock:
                deps.state.notices[:0] = notices[i:]
            raise
