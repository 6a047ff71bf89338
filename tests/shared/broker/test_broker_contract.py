"""The broker port's contract, run against both adapters.

Each test gets ``connect``: a factory of *connections* to one broker (a fresh
MemoryServer, or RabbitMQ), each with a thread running ``run()`` and the
service topology declared. A second connection stands in for a second process
(a restarted agent, another service); RabbitMQ tests get a vhost of their
own (tests/shared/broker/conftest.py).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable

import pytest
from waiting import wait_until

from spotsweep.shared.broker.memory_server import topic_matches
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing, ack_all
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.topology import (
    CONTROL_EXCHANGE,
    COLLECTOR_QUEUE,
    DEAD_LETTER_QUEUE,
    EVENTS_EXCHANGE,
    PLANNER_EVENTS_QUEUE,
    SWEEPS_QUEUE,
    TRIALS_EXCHANGE,
    event_routing_key,
    service_queues,
    trials_queue,
)

pytestmark = pytest.mark.timeout(60)

Connect = Callable[..., Broker]
QUEUES = service_queues(("gpu", "cpu"))


class Inbox:
    """A handler that records deliveries (acking them if asked) for the test to take."""

    def __init__(self, ack: bool = False) -> None:
        self._ack = ack
        self._q: queue.Queue[Delivery] = queue.Queue()

    def __call__(self, d: Delivery) -> None:
        if self._ack:
            d.ack()
        self._q.put(d)

    def get(self, timeout: float = 10.0) -> Delivery:
        return self._q.get(timeout=timeout)

    def nothing_for(self, seconds: float) -> bool:
        try:
            d = self._q.get(timeout=seconds)
        except queue.Empty:
            return True
        self._q.put(d)
        return False


def send(broker: Broker, exchange: str, key: str, body: bytes, **kw: object) -> None:
    broker.publish(Outgoing(exchange, key, body, **kw))  # type: ignore[arg-type]


def assert_queue_empty(connect: Connect, queue_name: str) -> None:
    """A fresh connection's first delivery is a marker published now: nothing was left (or redelivered)."""
    other = connect()
    send(other, "", queue_name, b"marker")
    inbox = Inbox(ack=True)
    other.consume(queue_name, inbox)
    assert inbox.get().body == b"marker"


def test_default_exchange_publish_then_consume(broker: Broker) -> None:
    send(broker, "", SWEEPS_QUEUE, b"spec", headers={"kind": "sweep.submit", "n": 3}, message_id="m-1")
    inbox = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, inbox)
    d = inbox.get()
    assert (d.body, d.routing_key, d.message_id, d.redelivered) == (b"spec", SWEEPS_QUEUE, "m-1", False)
    assert d.headers == {"kind": "sweep.submit", "n": 3}


def test_headers_never_none(broker: Broker) -> None:
    send(broker, "", SWEEPS_QUEUE, b"x")
    inbox = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, inbox)
    assert inbox.get().headers == {}


def test_topic_routing(broker: Broker) -> None:
    planner, collector = Inbox(ack=True), Inbox(ack=True)
    broker.consume(PLANNER_EVENTS_QUEUE, planner)
    broker.consume(COLLECTOR_QUEUE, collector, prefetch=10)
    # "trial.started.s1.v2": a sweep id with a dot must still reach the planner
    for key in (event_routing_key("trial.metrics", "s1"), event_routing_key("trial.started", "s1.v2"),
                event_routing_key("trial.started", "s1"), "trial.startedX.s1", event_routing_key("trial.checkpoint", "s.1")):
        send(broker, EVENTS_EXCHANGE, key, key.encode())
    assert {planner.get().routing_key for _ in range(2)} == {"trial.started.s1.v2", "trial.started.s1"}
    # The collector stores points and checkpoints; lifecycle events are the planner's to journal.
    assert {collector.get().routing_key for _ in range(2)} == {"trial.metrics.s1", "trial.checkpoint.s.1"}
    assert planner.nothing_for(0.3) and collector.nothing_for(0.1)


def test_direct_routing_by_key(broker: Broker) -> None:
    gpu, cpu = Inbox(ack=True), Inbox(ack=True)
    broker.consume(trials_queue("gpu"), gpu)
    broker.consume(trials_queue("cpu"), cpu)
    send(broker, TRIALS_EXCHANGE, "gpu", b"g")
    send(broker, TRIALS_EXCHANGE, "tpu", b"nobody")  # unroutable: dropped, not an error
    send(broker, TRIALS_EXCHANGE, "cpu", b"c")
    assert gpu.get().body == b"g"
    assert cpu.get().body == b"c"
    assert gpu.nothing_for(0.3) and cpu.nothing_for(0)


def test_fanout_reaches_every_private_queue(connect: Connect) -> None:
    inboxes = []
    for conn in (connect(), connect()):
        inbox = Inbox(ack=True)
        conn.consume(conn.declare_private_queue([(CONTROL_EXCHANGE, "")]), inbox)
        inboxes.append(inbox)
    send(connect(), CONTROL_EXCHANGE, "", b"cancel t1")
    assert [i.get().body for i in inboxes] == [b"cancel t1", b"cancel t1"]


def test_publish_to_unknown_exchange_is_permanent(broker: Broker) -> None:
    with pytest.raises(PermanentError):
        send(broker, "no.such.exchange", "k", b"x")
    send(broker, "", SWEEPS_QUEUE, b"still works")  # the adapter recovered its publishing channel


def test_consume_unknown_queue_is_permanent(broker: Broker) -> None:
    with pytest.raises(PermanentError):
        broker.consume("no.such.queue", Inbox())


def test_ack_removes(connect: Connect) -> None:
    first = connect()
    send(first, "", SWEEPS_QUEUE, b"once")
    inbox = Inbox(ack=True)
    first.consume(SWEEPS_QUEUE, inbox)
    assert inbox.get().body == b"once"
    first.stop()
    assert_queue_empty(connect, SWEEPS_QUEUE)


def test_double_ack_is_harmless(broker: Broker) -> None:
    send(broker, "", SWEEPS_QUEUE, b"a")
    send(broker, "", SWEEPS_QUEUE, b"b")
    inbox = Inbox()
    broker.consume(SWEEPS_QUEUE, inbox)
    d = inbox.get()
    d.ack()
    d.ack()
    d.nack(requeue=True)
    second = inbox.get()  # the connection survived, and "a" did not come back
    assert (second.body, second.redelivered) == (b"b", False)
    second.ack()


def test_nack_requeue_redelivers(broker: Broker) -> None:
    send(broker, "", SWEEPS_QUEUE, b"again")
    inbox = Inbox()
    broker.consume(SWEEPS_QUEUE, inbox)
    d = inbox.get()
    assert not d.redelivered
    d.nack(requeue=True)
    again = inbox.get()
    assert (again.body, again.redelivered) == (b"again", True)
    again.ack()


def test_nack_without_requeue_dead_letters(broker: Broker) -> None:
    dead = Inbox(ack=True)
    broker.consume(DEAD_LETTER_QUEUE, dead)
    send(broker, "", SWEEPS_QUEUE, b"poison", headers={"kind": "k"}, message_id="p-1")
    inbox = Inbox()
    broker.consume(SWEEPS_QUEUE, inbox)
    inbox.get().nack(requeue=False)
    d = dead.get()
    assert (d.body, d.message_id, d.headers["kind"]) == (b"poison", "p-1", "k")
    assert d.headers["x-death"][0]["queue"] == SWEEPS_QUEUE
    assert d.headers["x-death"][0]["reason"] == "rejected"
    assert inbox.nothing_for(0.3)


def test_handler_exception_dead_letters(broker: Broker) -> None:
    dead = Inbox(ack=True)
    broker.consume(DEAD_LETTER_QUEUE, dead)

    def boom(d: Delivery) -> None:
        raise ValueError("bad message")

    broker.consume(SWEEPS_QUEUE, boom)
    send(broker, "", SWEEPS_QUEUE, b"bad")
    assert dead.get().body == b"bad"


def test_unacked_delivery_goes_to_next_connection(connect: Connect) -> None:
    first = connect()
    send(first, "", SWEEPS_QUEUE, b"trial")
    inbox = Inbox()
    first.consume(SWEEPS_QUEUE, inbox)
    held = inbox.get()
    assert not held.redelivered
    first.stop(drain=False)  # e.g. the agent's spot instance vanished
    held.ack()  # too late: a no-op (logged), not a crash
    again = Inbox(ack=True)
    connect().consume(SWEEPS_QUEUE, again)
    d = again.get()
    assert (d.body, d.redelivered) == (b"trial", True)


def test_prefetch_bounds_unacked_per_consumer(broker: Broker) -> None:
    release = threading.Event()
    got: queue.Queue[bytes] = queue.Queue()

    def blocked(d: Delivery) -> None:
        got.put(d.body)
        release.wait(10)
        d.ack()

    broker.consume(SWEEPS_QUEUE, blocked, prefetch=1, concurrency=2)
    send(broker, "", SWEEPS_QUEUE, b"1")
    send(broker, "", SWEEPS_QUEUE, b"2")
    assert got.get(timeout=10) == b"1"
    with pytest.raises(queue.Empty):
        got.get(timeout=0.5)  # a second worker is idle, yet prefetch=1 holds "2" back
    other = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, other)
    assert other.get().body == b"2"  # it waited in the queue, not in the blocked consumer
    release.set()


def test_higher_priority_first_fifo_within(broker: Broker) -> None:
    for prio, body in [(1, b"1a"), (5, b"5a"), (9, b"9a"), (0, b"0a"), (5, b"5b"), (9, b"9b")]:
        send(broker, "", SWEEPS_QUEUE, body, priority=prio)
    inbox = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, inbox, prefetch=1)
    assert [inbox.get().body for _ in range(6)] == [b"9a", b"9b", b"5a", b"5b", b"1a", b"0a"]


def test_stop_drain_waits_for_running_handler(connect: Connect) -> None:
    conn = connect()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow(d: Delivery) -> None:
        started.set()
        assert release.wait(10)  # until the test has asked for the drain
        send(conn, EVENTS_EXCHANGE, event_routing_key("trial.metrics", "s1"), d.body)  # still allowed while draining
        d.ack()
        finished.set()

    conn.consume(trials_queue("gpu"), slow)
    send(conn, TRIALS_EXCHANGE, "gpu", b"work")
    assert started.wait(10)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (conn.stop(drain=True), stopped.set()), daemon=True)
    stopper.start()
    assert not stopped.is_set()  # the handler still runs: stop cannot have returned
    release.set()
    assert stopped.wait(15)
    assert finished.is_set()  # stop returned only after the handler had finished
    assert_queue_empty(connect, trials_queue("gpu"))  # the ack landed before the close
    collector = Inbox(ack=True)
    connect().consume(COLLECTOR_QUEUE, collector)
    assert collector.get().body == b"work"


def test_cancel_stops_new_deliveries(broker: Broker) -> None:
    inbox = Inbox(ack=True)
    consumer = broker.consume(SWEEPS_QUEUE, inbox)
    send(broker, "", SWEEPS_QUEUE, b"before")
    assert inbox.get().body == b"before"
    consumer.cancel()
    send(broker, "", SWEEPS_QUEUE, b"after")
    assert inbox.nothing_for(0.3)
    other = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, other)
    assert other.get().body == b"after"


def test_a_cancelled_consumer_may_finish_what_it_fetched(connect: Connect) -> None:
    """``finish_buffered``: prefetched deliveries go to the handler (which may hand them
    back itself), not back to the queue marked redelivered."""
    broker = connect()
    first_started, release = threading.Event(), threading.Event()
    seen: queue.Queue[tuple[bytes, bool]] = queue.Queue()

    def handler(d: Delivery) -> None:
        seen.put((d.body, d.redelivered))
        if d.body == b"first":
            first_started.set()
            release.wait(10)
        d.ack()

    for body in (b"first", b"second", b"third"):
        send(broker, "", SWEEPS_QUEUE, body)
    consumer = broker.consume(SWEEPS_QUEUE, handler, prefetch=3, concurrency=1, finish_buffered=True)
    assert first_started.wait(10)
    assert wait_until(lambda: len(consumer.unacked) == 3)  # type: ignore[attr-defined]  # the other two are in its buffer
    consumer.cancel()
    release.set()
    got = [seen.get(timeout=10) for _ in range(3)]
    assert got == [(b"first", False), (b"second", False), (b"third", False)]
    assert_queue_empty(connect, SWEEPS_QUEUE)


def test_handler_may_publish(broker: Broker) -> None:
    def relay(d: Delivery) -> None:
        send(broker, EVENTS_EXCHANGE, event_routing_key("trial.metrics", "s9"), d.body)
        d.ack()

    collector = Inbox(ack=True)
    broker.consume(COLLECTOR_QUEUE, collector)
    broker.consume(SWEEPS_QUEUE, relay)
    send(broker, "", SWEEPS_QUEUE, b"relayed")
    assert collector.get().body == b"relayed"


# -- RabbitMQ specifics -----------------------------------------------------


def test_rabbit_publish_without_run(rabbit_url: str) -> None:
    """The CLI path: publish from the constructing thread, never run(), stop."""
    cli = RabbitBroker(rabbit_url)
    cli.declare(QUEUES)
    send(cli, "", SWEEPS_QUEUE, b"from the cli")
    cli.stop()
    reader = RabbitBroker(rabbit_url)
    thread = threading.Thread(target=reader.run, daemon=True)
    thread.start()
    inbox = Inbox(ack=True)
    reader.consume(SWEEPS_QUEUE, inbox)
    assert inbox.get().body == b"from the cli"
    reader.stop()
    thread.join(10)


@pytest.mark.parametrize("connect", ["rabbit"], indirect=True)
def test_rabbit_handler_blocking_past_heartbeat_keeps_connection(connect: Connect) -> None:
    conn = connect(heartbeat=2)
    acked = threading.Event()

    def training(d: Delivery) -> None:
        # A handler that blocks (a trial runs for hours) for 3 heartbeat
        # intervals: what is tested, not a wait for something to happen.
        time.sleep(6)
        d.ack()
        acked.set()

    conn.consume(trials_queue("gpu"), training)
    send(conn, TRIALS_EXCHANGE, "gpu", b"trial")
    assert acked.wait(15)
    send(conn, TRIALS_EXCHANGE, "cpu", b"still connected")  # publishing still works on this connection
    conn.stop()
    assert_queue_empty(connect, trials_queue("gpu"))  # the ack reached the broker


def test_rabbit_bad_url_raises_retryable_with_redacted_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    started = time.monotonic()
    with pytest.raises(RetryableError) as info:
        RabbitBroker(f"amqp://guest:s3cret-pw@127.0.0.1:{port}/", connection_attempts=1)
    assert "s3cret-pw" not in str(info.value)
    assert f"amqp://guest:***@127.0.0.1:{port}/" in str(info.value)
    assert time.monotonic() - started < 10


def test_topic_matches() -> None:
    assert topic_matches("#", "a.b.c") and topic_matches("a.#", "a") and topic_matches("a.#.c", "a.b.x.c")
    assert topic_matches("trial.started.*", "trial.started.s1")
    assert not topic_matches("trial.started.*", "trial.started.s1.x")
    assert not topic_matches("trial.started.*", "trial.started")


def test_handler_may_stop_its_own_connection(connect: Connect) -> None:
    conn = connect()
    runner = threading.Thread(target=conn.run, daemon=True)  # a second run() caller just waits for the end
    runner.start()
    acked = threading.Event()

    def last_one(d: Delivery) -> None:
        conn.stop(drain=True)  # must not wait for itself
        d.ack()
        acked.set()

    conn.consume(SWEEPS_QUEUE, last_one)
    send(conn, "", SWEEPS_QUEUE, b"bye")
    runner.join(10)
    assert not runner.is_alive() and acked.is_set()
    assert_queue_empty(connect, SWEEPS_QUEUE)


def test_ack_all_acks_a_batch_once(connect: Connect) -> None:
    """The collector's path: a whole batch acked in one step; an already settled one is skipped."""
    first = connect()
    for i in range(20):
        send(first, "", SWEEPS_QUEUE, str(i).encode())
    inbox = Inbox()
    first.consume(SWEEPS_QUEUE, inbox, prefetch=20)
    batch = [inbox.get() for _ in range(20)]
    batch[3].ack()
    ack_all(batch)
    first.stop()
    assert_queue_empty(connect, SWEEPS_QUEUE)


def test_publish_async_confirms_later_in_order_and_reports_errors_through_the_future(broker: Broker) -> None:
    futures = [broker.publish_async([Outgoing("", SWEEPS_QUEUE, f"{i}".encode())]) for i in range(10)]
    futures.append(broker.publish_async([]))
    for f in futures:
        assert f.result(timeout=10) is None
    inbox = Inbox(ack=True)
    broker.consume(SWEEPS_QUEUE, inbox, prefetch=10)
    assert [inbox.get().body for _ in range(10)] == [f"{i}".encode() for i in range(10)]
    bad = broker.publish_async([Outgoing("no.such.exchange", "k", b"x")])
    with pytest.raises(PermanentError):
        bad.result(timeout=10)
    send(broker, "", SWEEPS_QUEUE, b"still works")


def test_consumers_counts_who_reads_a_queue(connect: Connect) -> None:
    """What `submit` and `status` ask before warning that no agent reads a class's trials."""
    broker = connect()
    assert broker.consumers("spotsweep.trials.nobody") is None  # never declared
    assert broker.consumers(SWEEPS_QUEUE) == 0
    other = connect()
    consumer = other.consume(SWEEPS_QUEUE, Inbox(ack=True))
    assert wait_until(lambda: broker.consumers(SWEEPS_QUEUE) == 1)
    consumer.cancel()
    assert wait_until(lambda: broker.consumers(SWEEPS_QUEUE) == 0)
    assert broker.consumers("spotsweep.trials.nobody") is None  # a missing queue leaves the connection usable
    send(broker, "", SWEEPS_QUEUE, b"still works")
