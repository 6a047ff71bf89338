"""A broker that counts what it publishes: the planner's ``spotsweep_trials_dispatched_total``, at the edge.

The planner publishes trials from one place (its outbox) through the broker
it was given; wrapping that broker counts every trial message RabbitMQ
confirmed, first attempts and retries alike, without a line in the planner's
handlers. It also remembers the resource classes it published to: the
queues whose depth the planner samples (``spotsweep_queue_depth{class}``).
Everything else is passed through unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from spotsweep.shared import metrics, topology
from spotsweep.shared.broker.port import Broker, Consumer, Handler, Outgoing
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.topology import QueueSpec


class SeenClasses:
    """The resource classes trials were published to (kept across reconnections), thread-safe."""

    def __init__(self, *initial: str) -> None:
        self._classes, self._lock = set(initial), threading.Lock()

    def add(self, names: Iterable[str]) -> None:
        with self._lock:
            self._classes.update(names)

    def snapshot(self) -> set[str]:
        with self._lock:
            return set(self._classes)


class TrialsCounted(Broker):
    """``broker``, counting the confirmed messages to the trials exchange (see the module's docstring)."""

    def __init__(self, broker: Broker, classes: SeenClasses) -> None:
        self.inner = broker
        self.classes = classes

    def _sent(self, messages: Sequence[Outgoing]) -> None:
        trials = [m for m in messages if m.exchange == topology.TRIALS_EXCHANGE]
        if trials:
            metrics.TRIALS_DISPATCHED.inc(len(trials))
            self.classes.add(m.routing_key for m in trials)

    def publish(self, message: Outgoing) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Outgoing]) -> None:
        self.inner.publish_many(messages)
        self._sent(messages)

    def publish_async(self, messages: Sequence[Outgoing]) -> Future[None]:
        future = self.inner.publish_async(messages)
        sent = list(messages)
        future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self._sent(sent))
        return future

    def declare(self, queues: Iterable[QueueSpec]) -> None:
        self.inner.declare(queues)

    def consume(self, queue: str, handler: Handler, *, prefetch: int = 1, concurrency: int = 1,
                finish_buffered: bool = False, retry: Backoff | None = None,
                accept_users: Collection[str] | None = None, **more: Any) -> Consumer:
        return self.inner.consume(queue, handler, prefetch=prefetch, concurrency=concurrency,
                                  finish_buffered=finish_buffered, retry=retry, accept_users=accept_users, **more)

    def consumers(self, queue: str) -> int | None:
        return self.inner.consumers(queue)

    def queue_depth(self, queue: str) -> int | None:
        return self.inner.queue_depth(queue)

    def declare_private_queue(self, bindings: Iterable[tuple[str, str]]) -> str:
        return self.inner.declare_private_queue(bindings)

    def run(self) -> None:
        self.inner.run()

    def stop(self, drain: bool = True) -> None:
        self.inner.stop(drain)

    def __getattr__(self, name: str) -> Any:  # an adapter's own extras (e.g. ``stopping``)
        return getattr(self.inner, name)


def depths(broker: Broker, classes: SeenClasses) -> dict[str, float]:
    """The depth of each known class's trials queue (those not declared yet are left out)."""
    out: dict[str, float] = {}
    for resource_class in sorted(classes.snapshot()):
        depth = broker.queue_depth(topology.trials_queue(resource_class))
        if depth is not None:
            out[resource_class] = float(depth)
    return out
