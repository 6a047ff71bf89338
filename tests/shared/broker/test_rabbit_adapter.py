"""RabbitMQ-only behaviour the in-memory broker has no counterpart for."""

from __future__ import annotations

import threading
import time

import pika
import pytest

from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.topology import SWEEPS_QUEUE, service_queues

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


def test_publish_many_is_one_transaction_and_every_message_lands(rabbit_url: str) -> None:
    broker = RabbitBroker(rabbit_url)
    broker.declare(service_queues())
    broker.publish_many([Outgoing("", SWEEPS_QUEUE, str(i).encode()) for i in range(500)])
    broker.stop(drain=False)
    admin = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    count = admin.channel().queue_declare(SWEEPS_QUEUE, passive=True).method.message_count
    admin.close()
    assert count == 500
