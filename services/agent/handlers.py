"""Agent handlers: a trial delivery runs to its end, then is acked.

The ack comes only after the attempt's final event is confirmed by the
broker, so a node that dies at any point before leaves the trial unacked and
RabbitMQ hands it to another agent, which resumes from the last uploaded
checkpoint. On a hard stop (second SIGTERM) the handler neither publishes nor
acks: the closing connection puts the trial back.

A delivery that comes back ``redelivered`` was lost with its previous holder
(kill -9, a node gone, a broker restart, RabbitMQ's consumer_timeout). Each
loss is counted in the artifact store; past ``retries.max_lost`` the attempt
is reported failed and dead-lettered, so a trial that takes its agents down
cannot circle forever. A trial handed back on purpose (a draining agent, a
node that looks broken, a prefetched delivery of a cancelled consumer) never
counts as a loss: it is republished, or requeued after a hand-back marker
(:mod:`.handback`). A second copy of an attempt this agent runs or ran
(:mod:`.attempts`) is acked and dropped before anything starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from spotsweep.services.agent import handback
from spotsweep.services.agent.capacity import Request
from spotsweep.services.agent.runner import DeliveryLost, run_trial
from spotsweep.services.agent.state import Agent, Slots
from spotsweep.shared import log, topology
from spotsweep.shared.broker.dispatch import dead_letter
from spotsweep.shared.broker.port import Broker, Consumer, Delivery, Outgoing
from spotsweep.shared.errors import DecodeError, RetryableError
from spotsweep.shared.messages import (
    CancelSweep, Envelope, StopTrial, TrialFinished, TrialLost, TrialMessage, decode, encode,
)

_log = log.get("spotsweep.agent")
__all__ = ["Agent", "Connection", "Slots", "handle_control", "handle_trial", "send_notices"]


@dataclass
class Connection:
    """One broker connection of the agent: what its handlers need besides the :class:`~.state.Agent`."""

    broker: Broker
    agent: Agent
    lost: threading.Event = field(default_factory=threading.Event)  # set when this connection is gone
    lost_reason: str = "the connection to RabbitMQ was lost"
    trials_consumer: Consumer | None = None
    resume: Callable[[], object] | None = None  # subscribe to the trials queue again (set by main.connect)
    # Hand a trial back by republishing it (it then carries this agent's user_id, which other agents refuse
    # unless agents and the planner share a broker user); else it is requeued with a hand-back marker.
    republish: bool = True
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
    def slots(self) -> Slots:
        return self.agent.slots

    def publish_event(self, event: Envelope) -> None:
        """Publish and wait for the broker's confirm."""
        self.broker.publish(_outgoing(event))

    def send_event(self, event: Envelope) -> Future[None]:
        """Publish without waiting: the runner waits for these confirms only where
        it must (before a checkpoint is committed, and before the delivery is acked)."""
        return self.broker.publish_async([_outgoing(event)])


def _outgoing(event: Envelope) -> Outgoing:
    kind = getattr(event, "kind", "event")
    return Outgoing(topology.EVENTS_EXCHANGE, topology.event_routing_key(kind, event.sweep_id), encode(event),
                    headers={"sweep_id": event.sweep_id, "trial_id": event.trial_id, "attempt": event.attempt},
                    message_id=event.message_id)


def _hand_back(delivery: Delivery, msg: TrialMessage, conn: Connection) -> None:
    """Put a trial we will not run back on its queue without it counting as a loss: republished
    when this agent's user is the planner's; else requeued (the planner's user_id intact) after a
    hand-back marker that the next agent subtracts from its loss count (:mod:`.handback`)."""
    if not conn.republish:
        if not delivery.redelivered:  # a redelivered one passes its earlier requeue's verdict on
            handback.record_handback(conn.agent.store, msg)
        delivery.nack(requeue=True)
        return
    body = delivery.body
    if delivery.redelivered and msg.resume_from is not None and msg.resume_from.folder is None:
        # A republished copy is not marked redelivered: say "unknown" instead of "no checkpoint",
        # as the lost run may have committed one (uploads.restore).
        body = encode(msg.model_copy(update={"resume_from": None}))
    conn.broker.publish(Outgoing(topology.TRIALS_EXCHANGE, msg.resource_class, body, headers=dict(delivery.headers),
                                 message_id=delivery.message_id, priority=delivery.priority))
    delivery.ack()


def handle_trial(delivery: Delivery, conn: Connection) -> None:
    with conn.busy():
        _handle_trial(delivery, conn)


def _handle_trial(delivery: Delivery, conn: Connection) -> None:
    msg = decode(delivery.body)
    if not isinstance(msg, TrialMessage):
        raise DecodeError(f"expected a trial message on the trials queue, got {getattr(msg, 'kind', '?')}")
    with log.bound(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt), \
            conn.agent.ledger.hold(Request(msg.cpus, msg.memory, msg.gpus), lambda: _stop_waiting(msg, conn)) as room:
        if room.verdict == "never":
            _refuse(delivery, msg, conn, room.reason)
            return
        if conn.lost.is_set():
            raise RetryableError(conn.lost_reason)  # the delivery is void: the broker hands it out again
        if conn.agent.kill.is_set():
            return  # a hard stop: neither reported nor acked (the closing connection puts it back)
        if conn.agent.preempt.is_set() or conn.agent.health.tripped:
            # Draining (the node is going away) or a broken node: do not start
            # it here; another agent takes it.
            _hand_back(delivery, msg, conn)
            return
        key = (msg.trial_id, msg.attempt)
        why = conn.agent.attempts.claim(key, conn.lost)
        if why is not None:  # a copy the broker handed out again (services/agent/attempts.py)
            _log.warning("dropped a second copy of an attempt this agent " + ("is running" if why == "running" else "ran"))
            delivery.ack()
            return
        try:
            _claimed(delivery, msg, conn, key)
        except BaseException:
            conn.agent.attempts.release(key, conn.lost)  # lost or not reported: it comes back to run again
            raise


def _stop_waiting(msg: TrialMessage, conn: Connection) -> bool:
    """Whether a trial waiting for room on this agent should stop waiting (and be handed back, or
    reported cancelled without running)."""
    agent = conn.agent
    return (conn.lost.is_set() or agent.preempt.is_set() or agent.kill.is_set() or agent.health.tripped
            or agent.is_cancelled(msg.sweep_id))


def _refuse(delivery: Delivery, msg: TrialMessage, conn: Connection, reason: str) -> None:
    """A trial whose resources this agent can never offer: report the attempt failed with the reason, and ack.
    The planner retries it within retries.max_failures, so an agent of the class that offers more may run it."""
    error = f"not run: {reason} (agent {conn.agent.config.agent_id}; docs/trial-contract.md, Resources)"
    _log.error("trial refused: it asks for more than this agent offers", reason=reason)
    conn.publish_event(_failed(msg, conn, error, failure="refused"))
    delivery.ack()


def _claimed(delivery: Delivery, msg: TrialMessage, conn: Connection, key: tuple[str, int]) -> None:
    """Run an attempt this agent claimed, report its end and settle its delivery."""
    losses = handback.count_loss(conn.agent.store, msg) if delivery.redelivered else 0
    if losses > msg.max_lost:
        _dead_letter(delivery, msg, conn, losses)
        conn.agent.attempts.ended(key, conn.lost)
        return
    final = _run(delivery, msg, conn, losses)
    if final is None:  # the planner stopped this run: another one counts
        delivery.ack()
        conn.agent.attempts.ended(key, conn.lost)
        return
    if conn.agent.kill.is_set():
        _log.warning("hard stop: trial left unacked for redelivery")
        conn.agent.attempts.release(key, conn.lost)
        return
    if conn.agent.health.record(final):
        # Stop the consumer before the ack: the ack frees a prefetch slot,
        # and a trial the broker put there would only be handed back.
        _trip(conn)
    # The ack follows the final event's confirm, sent by whichever thread
    # sees the confirm (the broker's I/O thread): this worker takes its
    # next trial meanwhile instead of waiting a broker round trip.
    sent = conn.send_event(final)
    if conn.agent.preempt.is_set():
        # Draining: the connection closes a few seconds after the last
        # handler returns (DRAIN_GRACE_S); wait here, so that a slow
        # confirm has all of --after-grace, as before the drain ends.
        wait([sent])
    sent.add_done_callback(lambda done: _settle(delivery, done, conn, key))


def _settle(delivery: Delivery, sent: Future[None], conn: Connection, key: tuple[str, int]) -> None:
    """Ack a finished trial once its final event is confirmed; put it back if that failed."""
    error = sent.exception()
    if error is None:
        conn.agent.attempts.ended(key, conn.lost)
        delivery.ack()
        return
    conn.agent.attempts.release(key, conn.lost)
    # Not reported: the trial runs again elsewhere (as when the agent dies
    # here); the planner fences off the second run of an attempt it has decided.
    _log.error("final event not confirmed: trial requeued", error=str(error))
    with suppress(RetryableError):  # the connection is gone: the broker requeues it anyway
        delivery.nack(requeue=True)


def _run(delivery: Delivery, msg: TrialMessage, conn: Connection, losses: int) -> TrialFinished | None:
    if conn.agent.is_cancelled(msg.sweep_id):
        return _failed(msg, conn, "sweep cancelled", outcome="cancelled")
    with conn.agent.slots.take() as (slot, gpu):
        control = conn.agent.controls(msg.sweep_id, conn.lost)
        try:
            return run_trial(msg, conn.agent.store, conn.send_event, conn.agent.config, control, gpu,
                             redelivered=delivery.redelivered, losses=losses)
        except DeliveryLost as e:
            notice = TrialLost(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                               agent=conn.agent.config.agent_id, run_id=e.run_id, reason="", duration=e.duration)
            conn.agent.note_lost(notice, lambda: conn.lost_reason)
            raise
        except RetryableError:
            raise  # the broker or S3 is away: no report, the trial is redelivered
        except Exception as e:
            # The agent itself broke on this trial (a full disk, a bad
            # checkpoint pointer): report a failed attempt so the planner
            # retries or fails it, instead of losing it.
            _log.exception("agent error while running the trial")
            return _failed(msg, conn, f"agent {conn.agent.config.agent_id} error: {type(e).__name__}: {e}", failure="agent")


def _dead_letter(delivery: Delivery, msg: TrialMessage, conn: Connection, losses: int) -> None:
    error = (f"lost with its agent {losses} times (retries.max_lost={msg.max_lost}): the trial may be taking its "
             "agents down (host OOM, a driver crash), or nodes vanish without notice; dead-lettered to "
             f"{topology.DEAD_LETTER_QUEUE}")
    _log.error("trial dead-lettered", losses=losses, max_lost=msg.max_lost)
    conn.publish_event(_failed(msg, conn, error, failure="lost"))
    dead_letter(delivery, error)  # the reason travels in the message's headers too


def _trip(conn: Connection) -> None:
    """The node looks broken: stop taking trials for the cooldown (running ones go on), say so, try again after."""
    health = conn.agent.health
    _log.error(f"agent stops taking trials for {health.cooldown:g} s: recent failures of several sweeps blamed "
               "this node (a broken GPU, driver or disk, or the agent's own errors); it takes trials again after that, "
               "and stops again at the next such failure if the node is still broken", agent=conn.agent.config.agent_id,
               detail=health.summary())
    if conn.trials_consumer is not None:
        with suppress(RetryableError):  # the connection is gone; start() will not consume again either
            conn.trials_consumer.cancel()
    resume_after_cooldown(conn)


def resume_after_cooldown(conn: Connection) -> None:
    """Subscribe to the trials queue again once the breaker's cooldown is over."""
    timer = threading.Timer(conn.agent.health.remaining(), _resume, args=(conn,))
    timer.daemon = True
    timer.start()


def _resume(conn: Connection) -> None:
    if conn.lost.is_set() or conn.agent.preempt.is_set() or conn.agent.kill.is_set() or conn.resume is None:
        return  # a new connection's start() decides; a draining agent takes nothing more
    if conn.agent.health.tripped:  # a clock that woke a little early
        resume_after_cooldown(conn)
        return
    _log.warning("breaker cooldown over: taking trials again", agent=conn.agent.config.agent_id)
    with suppress(RetryableError):  # the connection is gone: the next connection's start() consumes
        conn.resume()


def _failed(msg: TrialMessage, conn: Connection, error: str, outcome: str = "failed", failure: str | None = None) -> TrialFinished:
    return TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, outcome=outcome,  # type: ignore[arg-type]
                         error=error, agent=conn.agent.config.agent_id, failure=failure)  # type: ignore[arg-type]


def handle_control(delivery: Delivery, conn: Connection) -> None:
    """A control message from the planner, by its kind (any other kind is dead-lettered)."""
    msg = decode(delivery.body)
    kind = str(getattr(msg, "kind", "?"))  # every decoded message has one; the envelope type does not say so
    act = _CONTROLS.get(kind)
    if act is None:
        raise DecodeError(f"expected a control message (sweep.cancel, trial.stop) on the control queue, got {kind}")
    act(msg, conn)
    delivery.ack()


def _cancel_sweep(msg: CancelSweep, conn: Connection) -> None:
    conn.agent.cancel(msg.sweep_id)
    _log.info("sweep cancelled: its trials on this agent stop", sweep_id=msg.sweep_id)


def _stop_trial(msg: StopTrial, conn: Connection) -> None:
    conn.agent.stop(msg.run_id, msg.reason)


# What each control message does, by its kind (a new control is a row here).
_CONTROLS: dict[str, Callable[[Any, Connection], None]] = {"sweep.cancel": _cancel_sweep, "trial.stop": _stop_trial}


def send_notices(conn: Connection) -> None:
    """Report runs lost with an earlier connection (once this one is up)."""
    notices = conn.agent.take_notices()
    for i, (notice, reason) in enumerate(notices):
        try:
            conn.publish_event(notice.model_copy(update={"reason": reason()}))
        except RetryableError:
            conn.agent.return_notices(notices[i:])
            raise
