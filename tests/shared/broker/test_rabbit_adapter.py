"""RabbitMQ-only behaviour the in-memory broker has no counterpart for."""

from __future__ import annotations

import threading
import time

import pika
import pytest

from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.topology import SWEEPS_QUEUE, QueueSpec, service_queues

pytestmark = pytest.mark.timeout(60)


def test_a_consumer_the_broker_cancels_ends_run_so_the_service_reconnects(rabbit_url: str) -> None:
    """Deleting the queue cancels the consumer (as a leader move or consumer_timeout
    closes its channel): run() must raise, not go quiet while holding deliveries."""
    broker = RabbitBroker(rabbit_url)
    broker.declare(service_queues())
    broker.consume(SWEEPS_QUEUE, lambda d: d.ack())
    errors: list[BaseException] = []

    def run() -> None:
        try:
            broker.run()
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.5)
    admin = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    admin.channel().queue_delete(SWEEPS_QUEUE)
    admin.close()
    thread.join(20)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RetryableError)


def _count(rabbit_url: str, queue: str) -> int:
    admin = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        return admin.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        admin.close()


def test_publish_many_returns_once_every_message_is_confirmed(rabbit_url: str) -> None:
    broker = RabbitBroker(rabbit_url)
    broker.declare(service_queues())
    broker.publish_many([Outgoing("", SWEEPS_QUEUE, str(i).encode()) for i in range(500)])
    broker.stop(drain=False)
    assert _count(rabbit_url, SWEEPS_QUEUE) == 500


def test_publishes_from_many_threads_are_all_confirmed_while_the_loop_runs(rabbit_url: str) -> None:
    """Confirms are tracked, not awaited one by one on the I/O thread: concurrent
    publishers each return once their own messages are confirmed."""
    broker = RabbitBroker(rabbit_url)
    broker.declare(service_queues())
    loop = threading.Thread(target=broker.run, daemon=True)
    loop.start()
    errors: list[BaseException] = []

    def publisher(k: int) -> None:
        try:
            for i in range(50):
                broker.publish(Outgoing("", SWEEPS_QUEUE, f"{k}-{i}".encode()))
            broker.publish_many([Outgoing("", SWEEPS_QUEUE, f"{k}-batch-{i}".encode()) for i in range(50)])
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=publisher, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and _count(rabbit_url, SWEEPS_QUEUE) == 8 * 100
    with pytest.raises(PermanentError):  # the channel the broker closes fails its batch, not the next one
        broker.publish_many([Outgoing("", SWEEPS_QUEUE, b"ok"), Outgoing("no.such.exchange", "k", b"x")])
    broker.publish(Outgoing("", SWEEPS_QUEUE, b"after"))
    broker.stop(drain=False)
    loop.join(10)


def test_a_message_the_broker_refuses_raises_retryable(rabbit_url: str) -> None:
    """A nack (here: a full queue that rejects publishes) is never reported as published."""
    broker = RabbitBroker(rabbit_url)
    full = QueueSpec("bench.full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}, dead_letter=False)
    broker.declare([full])
    broker.publish(Outgoing("", full.name, b"fits"))
    with pytest.raises(RetryableError, match="nacked"):
        broker.publish_many([Outgoing("", full.name, b"no room"), Outgoing("", full.name, b"none either")])
    broker.stop(drain=False)
    assert _count(rabbit_url, full.name) == 1


def test_a_vhost_that_does_not_exist_is_a_clear_error_naming_it(rabbit_url: str) -> None:
    """pika says only ``ProbableAccessDeniedError``; the user must read which vhost, and that it is missing.
    Retryable all the same: a running service that loses its vhost waits for it (test_metrics_health)."""
    missing = rabbit_url.rsplit("/", 1)[0] + "/no-such-vhost-31"
    with pytest.raises(RetryableError) as caught:
        RabbitBroker(missing, connection_attempts=1)
    text = str(caught.value)
    assert "vhost 'no-such-vhost-31'" in text and "not found" in text, text
    assert "ProbableAccessDeniedError" not in text and "guest:guest" not in text, text


def test_an_idle_connection_hears_the_broker_at_least_every_heartbeat(rabbit_url: str) -> None:
    """The agent's hold (services/agent/hold.py) renews only while the broker was heard within 1.5 heartbeats:
    RabbitMQ's heartbeat frames alone keep an idle connection well inside that."""
    broker = RabbitBroker(rabbit_url, heartbeat=2)
    try:
        ages = []
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            ages.append(broker.heard_age())
            time.sleep(0.1)
        print(f"longest unheard: {max(a for a in ages if a is not None):.2f} s")
        assert max(a for a in ages if a is not None) < 3.0, ages
    finally:
        broker.stop(drain=False)


def test_an_abandoned_connection_ends_run_as_lost_saying_why(rabbit_url: str) -> None:
    broker = RabbitBroker(rabbit_url)
    broker.abandon("the hold lapsed")
    with pytest.raises(RetryableError):
        broker.run()
    assert broker.close_reason == "the hold lapsed"
