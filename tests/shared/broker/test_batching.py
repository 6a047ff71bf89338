"""BatchingHandler over both adapters: flush by size, by time, and poison isolation."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import pytest

from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.dispatch import QUEUE_HEADER, REASON_HEADER
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.topology import COLLECTOR_QUEUE, DEAD_LETTER_QUEUE, EVENTS_EXCHANGE, service_queues

pytestmark = pytest.mark.timeout(60)

QUEUES = service_queues()


class Recorder:
    """A batch handler that records each call's bodies, failing as told."""

    def __init__(self, fail: Callable[[list[bytes]], None] = lambda bodies: None) -> None:
        self.calls: queue.Queue[list[bytes]] = queue.Queue()
        self._fail = fail

    def __call__(self, batch: list[Delivery]) -> None:
        bodies = [d.body for d in batch]
        self._fail(bodies)
        self.calls.put(bodies)

    def next(self, timeout: float = 10.0) -> list[bytes]:
        return self.calls.get(timeout=timeout)


def publish_events(broker: Broker, *bodies: bytes) -> None:
    broker.publish_many([Outgoing(EVENTS_EXCHANGE, "trial.metrics.s1", b) for b in bodies])


def dead_inbox(broker: Broker) -> queue.Queue[Delivery]:
    dead: queue.Queue[Delivery] = queue.Queue()
    broker.consume(DEAD_LETTER_QUEUE, lambda d: (d.ack(), dead.put(d)))
    return dead


def test_flushes_by_size(broker: Broker) -> None:
    rec = Recorder()
    batching = BatchingHandler(rec, max_batch=3, max_wait=30)
    publish_events(broker, *[str(i).encode() for i in range(6)])
    broker.consume(COLLECTOR_QUEUE, batching, prefetch=6)
    batches = [rec.next(), rec.next()]  # a 30 s timer would time the test out: size flushed them
    assert sorted(b for batch in batches for b in batch) == [str(i).encode() for i in range(6)]
    assert [len(b) for b in batches] == [3, 3]
    batching.close()


def test_flushes_by_time(broker: Broker) -> None:
    rec = Recorder()
    batching = BatchingHandler(rec, max_batch=100, max_wait=0.3)
    broker.consume(COLLECTOR_QUEUE, batching, prefetch=100)
    started = time.monotonic()
    publish_events(broker, b"a", b"b")
    assert sorted(rec.next()) == [b"a", b"b"]
    assert time.monotonic() - started >= 0.25  # it waited for more before flushing
    assert rec.calls.empty()
    batching.close()


def test_close_flushes_and_acks(broker: Broker) -> None:
    rec = Recorder()
    batching = BatchingHandler(rec, max_batch=100, max_wait=30)
    buffered = threading.Event()

    def spy(d: Delivery) -> None:
        batching(d)
        buffered.set()

    consumer = broker.consume(COLLECTOR_QUEUE, spy, prefetch=100)
    publish_events(broker, b"x")
    assert buffered.wait(10)
    consumer.cancel()
    batching.close()
    assert rec.next(timeout=0) == [b"x"]


def test_poison_message_is_dead_lettered_rest_acked(broker: Broker) -> None:
    alone: list[bool] = []

    def fail(bodies: list[bytes]) -> None:
        if b"poison" in bodies:
            if len(bodies) == 1:
                alone.append(True)
            raise ValueError("cannot decode")

    rec = Recorder(fail)
    dead = dead_inbox(broker)
    publish_events(broker, b"a", b"poison", b"b", b"c")
    batching = BatchingHandler(rec, max_batch=4, max_wait=0.2)
    broker.consume(COLLECTOR_QUEUE, batching, prefetch=4)
    # Split in halves until the poison is alone: the good half is stored in one go, in order.
    assert [rec.next() for _ in range(2)] == [[b"a"], [b"b", b"c"]]
    d = dead.get(timeout=10)
    assert d.body == b"poison" and len(alone) == 2  # a bug gets one more try (it may be transient), not forever
    # The reason travels with it: an operator reads it from the dead-letter queue.
    assert d.headers[QUEUE_HEADER] == COLLECTOR_QUEUE and "cannot decode" in d.headers[REASON_HEADER]
    batching.close()
    # The rest were acked: the next thing the queue delivers is new.
    publish_events(broker, b"next")
    after = Recorder()
    broker.consume(COLLECTOR_QUEUE, BatchingHandler(after, max_batch=1), prefetch=1)
    assert after.next() == [b"next"]


def test_one_poison_in_a_large_batch_costs_a_few_tries_and_loses_nothing(broker: Broker) -> None:
    tries: list[int] = []

    def fail(bodies: list[bytes]) -> None:
        tries.append(len(bodies))
        if b"poison" in bodies:
            raise PermanentError("a value the database refuses")

    rec = Recorder(fail)
    dead = dead_inbox(broker)
    good = [str(i).encode() for i in range(63)]
    publish_events(broker, *good[:40], b"poison", *good[40:])
    batching = BatchingHandler(rec, max_batch=64, max_wait=30)
    broker.consume(COLLECTOR_QUEUE, batching, prefetch=64)
    assert dead.get(timeout=10).body == b"poison"
    stored: list[bytes] = []
    while len(stored) < len(good):
        stored += rec.next()
    assert stored == good  # each stored once, in order
    assert len(tries) <= 2 * 6 + 1  # bisection: about 2 log2(64) tries, not one per message
    batching.close()


def test_retryable_error_requeues_the_batch(broker: Broker) -> None:
    attempts: list[int] = []

    def fail_once(bodies: list[bytes]) -> None:
        attempts.append(len(bodies))
        if len(attempts) == 1:
            raise RetryableError("database down")

    seen: list[bool] = []
    rec = Recorder(fail_once)
    batching = BatchingHandler(rec, max_batch=2, max_wait=30, retry_pause=0.01)

    def spy(d: Delivery) -> None:
        seen.append(d.redelivered)
        batching(d)

    broker.consume(COLLECTOR_QUEUE, spy, prefetch=2)
    publish_events(broker, b"a", b"b")
    assert sorted(rec.next()) == [b"a", b"b"]
    assert seen == [False, False, True, True]
    batching.close()
