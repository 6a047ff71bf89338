"""The broker tests' one fixture: ``connect``, a factory of connections to one
broker, parametrized over both adapters (a fresh MemoryServer, or RabbitMQ in
a fresh vhost), each connection with a thread running ``run()`` and the
service topology declared. A second connection stands in for a second process
(a restarted agent, another service)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from spotsweep.shared.broker.memory import MemoryBroker, MemoryServer
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.topology import service_queues

Connect = Callable[..., Broker]
QUEUES = service_queues(("gpu", "cpu"))


@pytest.fixture(params=["memory", "rabbit"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    opened: list[tuple[Broker, threading.Thread]] = []
    if request.param == "memory":
        server = MemoryServer()
        make: Connect = lambda **kw: MemoryBroker(server, user="guest")  # noqa: E731  # as RabbitMQ's guest
    else:
        url = request.getfixturevalue("rabbit_url")  # a vhost of its own: queues start empty
        make = lambda **kw: RabbitBroker(url, **kw)  # noqa: E731

    def factory(**kw: object) -> Broker:
        broker = make(**kw)
        thread = threading.Thread(target=broker.run, daemon=True)
        thread.start()
        broker.declare(QUEUES)
        opened.append((broker, thread))
        return broker

    yield factory
    for broker, thread in opened:
        broker.stop(drain=False)
        thread.join(10)
        assert not thread.is_alive(), "run() did not return after stop()"


@pytest.fixture()
def broker(connect: Connect) -> Broker:
    return connect()
