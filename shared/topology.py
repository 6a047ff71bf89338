"""Queue and exchange names: one place, pure functions, no I/O.

Every service and every test asks this module for names, so a rename is one
edit. Isolation between deployments (or test runs) uses RabbitMQ vhosts, not
name prefixes, so the names users post to stay fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SWEEPS_QUEUE = "spotsweep.sweeps"  # specs and sweep commands, posted by users
TRIALS_EXCHANGE = "spotsweep.trials"  # direct, routing key = resource class
EVENTS_EXCHANGE = "spotsweep.events"  # topic, routing key = event kind
CONTROL_EXCHANGE = "spotsweep.control"  # fanout: cancellations to every agent
DEAD_LETTER_EXCHANGE = "spotsweep.dlx"  # fanout to the dead-letter queue
DEAD_LETTER_QUEUE = "spotsweep.dead"
COLLECTOR_QUEUE = "spotsweep.collector"  # metric points and checkpoints
PLANNER_EVENTS_QUEUE = "spotsweep.planner.events"  # lifecycle events only

MAX_PRIORITY = 9


def trials_queue(resource_class: str) -> str:
    """The queue agents serving ``resource_class`` consume trials from."""
    return f"spotsweep.trials.{resource_class}"


def event_routing_key(kind: str, sweep_id: str) -> str:
    """``trial.started`` of sweep ``s1`` routes as ``trial.started.s1``."""
    return f"{kind}.{sweep_id}"


# Every event kind, declared once here with the queue that consumes it: the bindings below come from
# these tables, each consumer decides by them (an event of another kind is acked with a warning, never
# dropped in silence), and tests/shared/test_topology.py holds shared/messages.py's models to them.
# The planner decides and journals the lifecycle events (so they are not routed to the collector too:
# two deliveries fewer per trial); the collector stores points, journals checkpoints and stagings and
# records what agents offer (``agent.seen.<class>``).
PLANNER_KINDS = ("trial.started", "trial.finished", "trial.lost", "trial.progress")
COLLECTOR_KINDS = ("trial.metrics", "trial.checkpoint", "trial.staging", "agent.seen")
COMMAND_KINDS = ("sweep.submit", "sweep.cancel", "sweep.extend")  # on the sweeps queue, for the planner
# "#", not "*": a sweep id may contain dots, and "*" matches exactly one word.
LIFECYCLE_BINDINGS = tuple(f"{kind}.#" for kind in PLANNER_KINDS)
COLLECTOR_BINDINGS = tuple(f"{kind}.#" for kind in COLLECTOR_KINDS)


def agent_seen_routing_key(resource_class: str) -> str:
    """An agent's announcement of what it offers routes as ``agent.seen.<class>``."""
    return f"agent.seen.{resource_class}"


@dataclass(frozen=True)
class QueueSpec:
    """A queue to declare and what binds it. ``exchange=""`` is the default exchange."""

    name: str
    bindings: tuple[tuple[str, str], ...] = ()  # (exchange, routing key)
    max_priority: int | None = None
    dead_letter: bool = True
    exclusive: bool = False
    arguments: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    type: str  # direct | topic | fanout


EXCHANGES = (ExchangeSpec(TRIALS_EXCHANGE, "direct"), ExchangeSpec(EVENTS_EXCHANGE, "topic"),
             ExchangeSpec(CONTROL_EXCHANGE, "fanout"), ExchangeSpec(DEAD_LETTER_EXCHANGE, "fanout"))


def dead_letter_queue() -> QueueSpec:
    return QueueSpec(DEAD_LETTER_QUEUE, ((DEAD_LETTER_EXCHANGE, ""),), dead_letter=False)


def sweeps_queue() -> QueueSpec:
    return QueueSpec(SWEEPS_QUEUE, max_priority=MAX_PRIORITY)


def trial_queue_spec(resource_class: str) -> QueueSpec:
    return QueueSpec(trials_queue(resource_class), ((TRIALS_EXCHANGE, resource_class),), max_priority=MAX_PRIORITY)


def collector_queue() -> QueueSpec:
    return QueueSpec(COLLECTOR_QUEUE, tuple((EVENTS_EXCHANGE, k) for k in COLLECTOR_BINDINGS))


def planner_events_queue() -> QueueSpec:
    return QueueSpec(PLANNER_EVENTS_QUEUE, tuple((EVENTS_EXCHANGE, k) for k in LIFECYCLE_BINDINGS))


def service_queues(resource_classes: tuple[str, ...] = ("gpu",)) -> tuple[QueueSpec, ...]:
    """Everything the control plane needs, declared by every service at start."""
    return (dead_letter_queue(), sweeps_queue(), collector_queue(), planner_events_queue(),
            *(trial_queue_spec(c) for c in resource_classes))
