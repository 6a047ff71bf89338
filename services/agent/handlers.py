"""Agent handlers: a trial delivery runs to its end, then is acked.

The ack comes only after the attempt's final event is confirmed by the
broker, so a node that dies at any point before leaves the trial unacked and
RabbitMQ hands it to another agent, which resumes from the last uploaded
checkpoint. On a hard stop (second SIGTERM) the handler neither publishes nor
acks: the closing connection puts the trial back.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from spotsweep.services.agent.runner import RunControl, RunnerConfig, run_trial
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.errors import DecodeError, RetryableError
from spotsweep.shared.messages import CancelSweep, Envelope, TrialFinished, TrialMessage, decode, encode

_log = log.get("spotsweep.agent")


class Slots:
    """Slot ids handed to trials; each slot is one GPU when the node has GPUs."""

    def __init__(self, n: int, gpus: list[str] | None) -> None:
        self.count = n
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


@dataclass
class AgentDeps:
    broker: Broker
    store: ArtifactStore
    config: RunnerConfig
    slots: Slots
    control: RunControl = field(default_factory=RunControl)
    lost: threading.Event = field(default_factory=threading.Event)  # set when this connection is gone
    cancelled: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish_event(self, event: Envelope) -> None:
        kind = getattr(event, "kind", "event")
        self.broker.publish(
            Outgoing(
                topology.EVENTS_EXCHANGE,
                topology.event_routing_key(kind, event.sweep_id),
                encode(event),
                headers={"sweep_id": event.sweep_id, "trial_id": event.trial_id, "attempt": event.attempt},
                message_id=event.message_id,
            )
        )

    def is_cancelled(self, sweep_id: str) -> bool:
        with self._lock:
            return sweep_id in self.cancelled


def handle_trial(delivery: Delivery, deps: AgentDeps) -> None:
    msg = decode(delivery.body)
    if not isinstance(msg, TrialMessage):
        raise DecodeError(f"expected a trial message on the trials queue, got {getattr(msg, 'kind', '?')}")
    with log.bound(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt):
        if deps.control.preempt.is_set():
            # Draining (the node is going away): do not start what would be
            # preempted at once; another agent takes it.
            delivery.nack(requeue=True)
            return
        if deps.is_cancelled(msg.sweep_id):
            final = _failed(msg, deps, "sweep cancelled", outcome="cancelled")
        else:
            with deps.slots.take() as (_, gpu):
                control = RunControl(
                    preempt=deps.control.preempt, kill=deps.control.kill, lost=deps.lost, grace=deps.control.grace,
                    cancelled=lambda: deps.is_cancelled(msg.sweep_id),
                )
                try:
                    final = run_trial(msg, deps.store, deps.publish_event, deps.config, control, gpu)
                except RetryableError:
                    raise  # the broker or S3 is away: no report, the trial is redelivered
                except Exception as e:
                    # The agent itself broke on this trial (a full disk, a bad
                    # checkpoint pointer): report a failed attempt so the
                    # planner retries or fails it, instead of losing it.
                    _log.exception("agent error while running the trial")
                    final = _failed(msg, deps, f"agent {deps.config.agent_id} error: {type(e).__name__}: {e}")
        if deps.control.kill.is_set():
            _log.warning("hard stop: trial left unacked for redelivery")
            return
        deps.publish_event(final)
        delivery.ack()


def _failed(msg: TrialMessage, deps: AgentDeps, error: str, outcome: str = "failed") -> TrialFinished:
    return TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, outcome=outcome,  # type: ignore[arg-type]
                         error=error, agent=deps.config.agent_id)


def handle_control(delivery: Delivery, deps: AgentDeps) -> None:
    msg = decode(delivery.body)
    if isinstance(msg, CancelSweep):
        with deps._lock:
            deps.cancelled.add(msg.sweep_id)
        _log.info("sweep cancelled: its trials on this agent stop", sweep_id=msg.sweep_id)
    delivery.ack()
