"""The dispatcher's one settle policy, as a pure function and through both adapters.

Each path a user depends on: a retryable error is retried in place and then
requeued; a permanent one is dead-lettered with its reason in a header an
operator reads from the dead-letter queue; an unexpected one is requeued once
and dead-lettered on the redelivery; a drain lets running handlers finish
and hands the deliveries not yet started back to the queue.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import structlog
from structlog.testing import LogCapture

from spotsweep.shared.broker import dispatch
from spotsweep.shared.broker.dispatch import QUEUE_HEADER, REASON_HEADER, Settle, settlement
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.errors import DecodeError, PermanentError, RetryableError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.topology import DEAD_LETTER_QUEUE, SWEEPS_QUEUE, service_queues

pytestmark = pytest.mark.timeout(60)

QUEUES = service_queues()
Connect = Callable[..., Broker]  # the ``connect`` fixture (conftest.py)
QUICK = Backoff(base=0.001, cap=0.001, attempts=3)

# -- the policy, with plain values ----------------------------------------------


def test_a_retryable_error_is_requeued() -> None:
    assert settlement(RetryableError("db away"), redelivered=False) == Settle("requeue", "db away")
    assert settlement(RetryableError("db away"), redelivered=True).action == "requeue"  # never dead-lettered


def test_a_permanent_error_is_dead_lettered_with_its_reason() -> None:
    assert settlement(DecodeError("body is not JSON"), redelivered=False) == Settle("dead_letter", "body is not JSON")


def test_an_unexpected_error_is_requeued_once_then_dead_lettered() -> None:
    assert settlement(KeyError("x"), redelivered=False).action == "requeue"
    last = settlement(KeyError("x"), redelivered=True)
    assert last.action == "dead_letter" and "KeyError" in last.reason and "redelivery" in last.reason


def test_a_reason_is_bounded() -> None:
    assert len(settlement(PermanentError("x" * 100_000), False).reason) < 2_100


# -- through both adapters --------------------------------------------------------

def dead_letters(broker: Broker) -> queue.Queue[Delivery]:
    dead: queue.Queue[Delivery] = queue.Queue()
    broker.consume(DEAD_LETTER_QUEUE, lambda d: (d.ack(), dead.put(d)))
    return dead


def post(broker: Broker, body: bytes, message_id: str = "m-1") -> None:
    broker.publish(Outgoing("", SWEEPS_QUEUE, body, headers={"sweep_id": "s-0000beef"}, message_id=message_id))


def test_retryable_is_retried_in_place_then_succeeds(connect: Connect) -> None:
    broker = connect()
    seen: queue.Queue[bool] = queue.Queue()

    def flaky(d: Delivery) -> None:
        seen.put(d.redelivered)
        if seen.qsize() < 3:
            raise RetryableError("database restarting")
        d.ack()

    broker.consume(SWEEPS_QUEUE, flaky, retry=QUICK)
    post(broker, b"spec")
    assert [seen.get(timeout=10) for _ in range(3)] == [False, False, False]  # in place: never went back


def test_retryable_past_its_retries_is_requeued(connect: Connect) -> None:
    broker = connect()
    seen: queue.Queue[bool] = queue.Queue()

    def down(d: Delivery) -> None:
        seen.put(d.redelivered)
        if not d.redelivered:
            raise RetryableError("database away")
        d.ack()

    broker.consume(SWEEPS_QUEUE, down, retry=QUICK)
    post(broker, b"spec")
    assert [seen.get(timeout=10) for _ in range(4)] == [False, False, False, True]  # 3 tries, then back in the queue


def test_permanent_is_dead_lettered_with_the_reason_in_a_header(connect: Connect) -> None:
    broker = connect()
    dead = dead_letters(broker)
    calls: list[Delivery] = []

    def refuse(d: Delivery) -> None:
        calls.append(d)
        raise DecodeError("sweep submission: body is not JSON")

    broker.consume(SWEEPS_QUEUE, refuse)
    post(broker, b"{not json", message_id="bad-1")
    d = dead.get(timeout=10)
    assert (d.body, d.message_id, d.headers["sweep_id"]) == (b"{not json", "bad-1", "s-0000beef")
    assert d.headers[REASON_HEADER] == "sweep submission: body is not JSON"
    assert d.headers[QUEUE_HEADER] == SWEEPS_QUEUE
    assert len(calls) == 1  # at once: never retried, never redelivered


def test_unexpected_is_requeued_once_then_dead_lettered(connect: Connect) -> None:
    broker = connect()
    dead = dead_letters(broker)
    seen: queue.Queue[bool] = queue.Queue()

    def bug(d: Delivery) -> None:
        seen.put(d.redelivered)
        raise ZeroDivisionError("division by zero")

    broker.consume(SWEEPS_QUEUE, bug)
    post(broker, b"spec")
    d = dead.get(timeout=10)
    assert [seen.get(timeout=1) for _ in range(2)] == [False, True] and seen.empty()
    assert "ZeroDivisionError" in d.headers[REASON_HEADER] and "division by zero" in d.headers[REASON_HEADER]


def test_drain_finishes_running_handlers_and_returns_the_rest(connect: Connect) -> None:
    first = connect()
    for i in range(3):
        post(first, f"{i}".encode(), message_id=f"m-{i}")
    started, release = threading.Event(), threading.Event()
    handled: list[bytes] = []

    def slow(d: Delivery) -> None:
        started.set()
        release.wait(10)
        handled.append(d.body)
        d.ack()

    consumer = first.consume(SWEEPS_QUEUE, slow, prefetch=3, concurrency=1)
    assert started.wait(10)
    stopper = threading.Thread(target=first.stop, kwargs={"drain": True})
    stopper.start()
    workers = consumer.workers  # type: ignore[attr-defined]  # both adapters' dispatcher
    for _ in range(1000):  # the stop reaches the consumer on the broker's own thread: wait for it
        if workers.cancelled:
            break
        time.sleep(0.01)
    assert workers.cancelled and stopper.is_alive()  # the drain waits for the running handler...
    release.set()
    stopper.join(10)
    assert not stopper.is_alive() and handled == [b"0"]  # ...which finished; the two not started never ran
    rest: queue.Queue[Delivery] = queue.Queue()
    connect().consume(SWEEPS_QUEUE, lambda d: (d.ack(), rest.put(d)), prefetch=3)
    assert sorted(rest.get(timeout=10).body for _ in range(2)) == [b"1", b"2"]


@contextlib.contextmanager
def captured() -> Iterator[list[dict]]:
    """The dispatcher's log lines as dicts with their bound context (the queue, the
    message id), as a service renders them. Its own logger is swapped: a module's
    logger is cached on first use (shared/log.py), so reconfiguring structlog would
    not reach it once another test has logged through it."""
    cap = LogCapture()
    saved = dispatch._log
    dispatch._log = structlog.wrap_logger(
        None, processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level, cap])
    try:
        yield cap.entries
    finally:
        dispatch._log = saved


@pytest.mark.parametrize("slow_after", [0.1, None])
def test_only_a_slow_handler_is_logged_and_the_line_says_what_was_slow(connect: Connect, slow_after: float | None) -> None:
    """A delivery over its consumer's bound is one warning naming the handler, the
    queue, the time and the bound; a consumer whose work is long by nature (the
    agent's trials: slow_after=None) and quick deliveries log nothing."""
    broker = connect()
    done: queue.Queue[bytes] = queue.Queue()

    def train(d: Delivery) -> None:
        if d.body == b"long":
            time.sleep(0.3)
        d.ack()
        done.put(d.body)

    with captured() as logs:
        broker.consume(SWEEPS_QUEUE, train, slow_after=slow_after)  # one worker: "end" runs after "long" is settled
        for body in (b"quick", b"long", b"end"):
            post(broker, body, message_id=body.decode())
        assert [done.get(timeout=10) for _ in range(3)] == [b"quick", b"long", b"end"]
        time.sleep(0.05)  # the settle of "end" (nothing to log) runs just after its handler returns
    slow = [e for e in logs if str(e["event"]).startswith("slow handler")]
    if slow_after is None:
        assert slow == []
        return
    assert len(slow) == 1, slow
    line = slow[0]
    assert line["message_id"] == "long" and line["queue"] == SWEEPS_QUEUE and line["outcome"] == "handled"
    assert "train" in line["handler"] and line["seconds"] >= 0.3 and line["slow_after"] == 0.1
    assert line["log_level"] == "warning" and "over 0.1 s" in line["event"]
