"""A planner for calling its handlers directly, over the in-memory repositories
(``h``, :mod:`spotsweep.services.planner.memory`) or, for the few tests
that prove the wiring or need a real transaction, a real PostgreSQL database, with the in-memory broker: what it publishes (trials, control
messages) is collected for the test to read."""

from __future__ import annotations

import json
import queue
from functools import partial
from typing import Any

import pytest

from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.handlers import handle_event, handle_sweep_message
from spotsweep.services.planner.memory import MemoryDb, memory_unit
from spotsweep.shared import topology
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.db import Database
from spotsweep.shared.messages import Envelope, TrialFinished, TrialMessage, TrialStarted, decode, encode


class Harness:
    """The planner over PostgreSQL (``database_url``) or, without one, over a :class:`MemoryDb` (``memory``)."""

    def __init__(self, delivery: Any, database_url: str | None = None) -> None:
        self.delivery = delivery
        self.memory = MemoryDb() if database_url is None else None
        self.db = Database(database_url) if database_url is not None else None
        if self.db is not None:
            self.db.migrate()
        self.broker = MemoryBroker()
        self.broker.declare(topology.service_queues(("cpu",)))
        self.deps = self.planner()
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

    def planner(self, **kw: Any) -> PlannerDeps:
        """A planner with nothing kept (a restarted one) over this database and, unless given, this broker."""
        kw.setdefault("broker", self.broker)
        if self.memory is None:
            return PlannerDeps(db=self.db, **kw)  # type: ignore[arg-type]
        return PlannerDeps(db=None, units=partial(memory_unit, self.memory), **kw)  # type: ignore[arg-type]

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

    def sweep(self, sweep_id: str) -> dict[str, Any] | None:
        if self.memory is not None:
            return self.memory.sweeps.get(sweep_id)
        with self.db.transaction() as conn:  # type: ignore[union-attr]
            return conn.execute("SELECT * FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()

    def trial(self, trial_id: str) -> dict[str, Any] | None:
        """The trial as the ``trial_results`` view shows it (``attempts``: its attempt)."""
        if self.memory is not None:
            row = self.memory.trials.get(trial_id)
            return None if row is None else {**row, "attempts": row["attempt"]}
        with self.db.transaction() as conn:  # type: ignore[union-attr]
            return conn.execute("SELECT * FROM trial_results WHERE trial_id = %s", (trial_id,)).fetchone()

    def states(self, sweep_id: str) -> dict[str, str]:
        if self.memory is not None:
            return {t: r["state"] for t, r in self.memory.trials.items() if r["sweep_id"] == sweep_id}
        with self.db.transaction() as conn:  # type: ignore[union-attr]
            rows = conn.execute("SELECT trial_id, state FROM trials WHERE sweep_id = %s", (sweep_id,)).fetchall()
        return {r["trial_id"]: r["state"] for r in rows}


@pytest.fixture()
def h(request: pytest.FixtureRequest, delivery: Any) -> Harness:
    """The planner over the in-memory repositories; over a
    fresh PostgreSQL database for a test marked ``parametrize("h", ["postgres"], indirect=True)``
    (which marks it ``needs_pg``): the few that prove the wiring or need a real transaction."""
    if getattr(request, "param", "memory") == "postgres":
        return Harness(delivery, request.getfixturevalue("database_url"))
    return Harness(delivery)
