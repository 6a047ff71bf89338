"""A planner wired to a real PostgreSQL database and the in-memory broker,
for calling its handlers directly: what it publishes (trials, control
messages) is collected for the test to read."""

from __future__ import annotations

import json
import queue
from typing import Any

import pytest

from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.handlers import handle_event, handle_sweep_message
from spotsweep.shared import topology
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.db import Database
from spotsweep.shared.messages import Envelope, TrialFinished, TrialMessage, TrialStarted, decode, encode


class Harness:
    def __init__(self, database_url: str, delivery: Any) -> None:
        self.delivery = delivery
        self.db = Database(database_url)
        self.db.migrate()
        self.broker = MemoryBroker()
        self.broker.declare(topology.service_queues(("cpu",)))
        self.deps = PlannerDeps(db=self.db, broker=self.broker)
        self.trials: queue.Queue[TrialMessage] = queue.Queue()
        self.control: queue.Queue[Envelope] = queue.Queue()
        self.priorities: dict[str, int] = {}  # message id -> the priority it was published at

        def take(d: Any) -> None:
            self.priorities[d.message_id] = d.priority
            self.trials.put(decode(d.body))  # type: ignore[arg-type]
            d.ack()

        self.broker.consume(topology.trials_queue("cpu"), take, prefetch=100)
        control_queue = self.broker.declare_private_queue([(topology.CONTROL_EXCHANGE, "")])
        self.broker.consume(control_queue, lambda d: (self.control.put(decode(d.body)), d.ack()), prefetch=100)

    def published(self, n: int | None = None, timeout: float = 2.0) -> list[TrialMessage]:
        out = []
        try:
            while n is None or len(out) < n:
                out.append(self.trials.get(timeout=timeout if n is not None else 0.2))
        except queue.Empty:
            pass
        return out

    def told(self, timeout: float = 2.0) -> Envelope | None:
        try:
            return self.control.get(timeout=timeout)
        except queue.Empty:
            return None

    def submit(self, spec: dict[str, Any], sweep_id: str = "sw1-000000a0") -> Any:
        d = self.delivery(json.dumps(spec).encode(), {"sweep_id": sweep_id})
        handle_sweep_message(d, self.deps)
        return d

    def event(self, event: Envelope, redelivered: bool = False) -> Any:
        d = self.delivery(encode(event), redelivered=redelivered)
        handle_event(d, self.deps)
        return d

    def start(self, msg: TrialMessage, **kw: Any) -> Any:
        return self.event(TrialStarted(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                       agent=kw.pop("agent", "a"), **kw))

    def finish(self, msg: TrialMessage, outcome: str = "completed", **kw: Any) -> Any:
        return self.event(TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                        outcome=outcome, **kw))  # type: ignore[arg-type]

    def sweep(self, sweep_id: str) -> dict[str, Any]:
        with self.db.transaction() as conn:
            return conn.execute("SELECT * FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()

    def trial(self, trial_id: str) -> dict[str, Any]:
        with self.db.transaction() as conn:
            return conn.execute("SELECT * FROM trial_results WHERE trial_id = %s", (trial_id,)).fetchone()

    def states(self, sweep_id: str) -> dict[str, str]:
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT trial_id, state FROM trials WHERE sweep_id = %s", (sweep_id,)).fetchall()
        return {r["trial_id"]: r["state"] for r in rows}


@pytest.fixture()
def h(database_url: str, delivery: Any) -> Harness:
    return Harness(database_url, delivery)
