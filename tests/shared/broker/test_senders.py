"""Who sent a message, on both adapters: the validated ``user_id`` and the dispatcher's ``accept_users``.

Every publish carries the connection's broker user; naming another is refused
by the broker (RabbitMQ: 406 PRECONDITION_FAILED; the memory broker the
same), and a consumer given ``accept_users`` dead-letters a delivery from
anyone else with the reason, without running its handler. The same checks
with several real RabbitMQ users: tests/security/test_broker_users.py.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

import pytest

from spotsweep.shared.broker.dispatch import REASON_HEADER, Throttle, refused_sender
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.topology import DEAD_LETTER_QUEUE, SWEEPS_QUEUE, service_queues

pytestmark = pytest.mark.timeout(60)

QUEUES = service_queues(("gpu",))
Connect = Callable[[], Broker]


# -- pure ------------------------------------------------------------------------


def test_a_sender_is_accepted_only_when_listed() -> None:
    assert refused_sender("planner", None) is None  # no accept_users: anyone (a single-user setup)
    assert refused_sender("planner", {"planner"}) is None
    reason = refused_sender("mallory", {"planner"})
    assert reason is not None and "'mallory'" in reason and "'planner'" in reason and "not run" in reason
    missing = refused_sender(None, {"planner"})
    assert missing is not None and "no user_id" in missing


def test_refusals_are_logged_once_per_period_per_queue_with_a_count() -> None:
    now = [0.0]
    throttle = Throttle(60.0, clock=lambda: now[0])
    assert throttle.allow("q") == 0
    assert [throttle.allow("q") for _ in range(3)] == [None, None, None]
    assert throttle.allow("other") == 0  # per queue
    now[0] = 61.0
    assert throttle.allow("q") == 3  # the next line says how many were held back


# -- through both adapters ---------------------------------------------------------


def collect(broker: Broker, queue_name: str, **kw: object) -> queue.Queue[Delivery]:
    got: queue.Queue[Delivery] = queue.Queue()
    broker.consume(queue_name, lambda d: (d.ack(), got.put(d)), **kw)  # type: ignore[arg-type]
    return got


def test_every_message_carries_its_connections_user(connect: Connect) -> None:
    broker = connect()
    got = collect(broker, SWEEPS_QUEUE)
    broker.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="m-1"))
    assert got.get(timeout=10).user_id == "guest"


def test_a_message_naming_another_user_is_refused_by_the_broker(connect: Connect) -> None:
    broker = connect()
    got = collect(broker, SWEEPS_QUEUE)
    with pytest.raises(PermanentError, match="406|PRECONDITION_FAILED"):
        broker.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="forged", user_id="planner"))
    broker.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="after"))  # the connection still publishes
    assert got.get(timeout=10).message_id == "after"
    assert got.empty()


def test_a_consumer_dead_letters_senders_it_does_not_accept_without_running_its_handler(connect: Connect) -> None:
    broker = connect()
    dead = collect(broker, DEAD_LETTER_QUEUE)
    ran: queue.Queue[Delivery] = queue.Queue()
    broker.consume(SWEEPS_QUEUE, lambda d: (ran.put(d), d.ack()), accept_users={"planner"})  # guest is not
    broker.publish(Outgoing("", SWEEPS_QUEUE, b"run me", message_id="forged-1", headers={"sweep_id": "s-0000beef"}))
    d = dead.get(timeout=10)
    assert (d.body, d.message_id) == (b"run me", "forged-1")
    assert "'guest'" in d.headers[REASON_HEADER] and "'planner'" in d.headers[REASON_HEADER]
    assert ran.empty()


def test_a_consumer_runs_what_its_accepted_users_send(connect: Connect) -> None:
    broker = connect()
    got = collect(broker, SWEEPS_QUEUE, accept_users={"planner", "guest"})
    broker.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="ok-1"))
    assert got.get(timeout=10).message_id == "ok-1"


def test_memory_connections_log_in_as_their_own_users() -> None:
    planner = MemoryBroker(user="planner")
    mallory = MemoryBroker(planner.server, user="mallory")
    planner.declare(QUEUES)
    got = collect(planner, SWEEPS_QUEUE, accept_users={"planner"})
    dead = collect(planner, DEAD_LETTER_QUEUE)
    mallory.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="from-mallory"))
    planner.publish(Outgoing("", SWEEPS_QUEUE, b"{}", message_id="from-planner"))
    assert got.get(timeout=10).message_id == "from-planner"
    assert dead.get(timeout=10).message_id == "from-mallory"
    with pytest.raises(PermanentError, match="authenticated user was 'mallory'"):
        mallory.publish(Outgoing("", SWEEPS_QUEUE, b"{}", user_id="planner"))
    planner.stop(drain=False)
    mallory.stop(drain=False)
