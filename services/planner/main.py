"""``spotsweep planner``: the thin process around the planner handlers."""

from __future__ import annotations

from functools import partial

from spotsweep.services.planner.handlers import PlannerDeps, handle_event, handle_sweep_message, publish_pending
from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database, required_database
from spotsweep.shared.middleware import guarded
from spotsweep.shared.runtime import broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import Settings

_log = log.get("spotsweep.planner")


def start(broker: Broker, db: Database, resource_classes: tuple[str, ...] = ("gpu",), window: int | None = 32) -> PlannerDeps:
    """Declare, migrate, recover the outbox, and start consuming. Used by local mode too."""
    broker.declare(topology.service_queues(resource_classes))
    with_startup_retries(db.migrate, "migrate the database")
    deps = PlannerDeps(db=db, broker=broker, window=window)
    recovered = with_startup_retries(lambda: publish_pending(deps), "publish pending trials")
    if recovered:
        _log.info("published trials left pending by a previous planner", trials=recovered)
    broker.consume(topology.SWEEPS_QUEUE, guarded(partial(handle_sweep_message, deps=deps), "sweep"), prefetch=1)
    broker.consume(topology.PLANNER_EVENTS_QUEUE, guarded(partial(handle_event, deps=deps), "event"), prefetch=16)
    return deps


def main(settings: Settings) -> int:
    db = required_database(settings.database_url, "planner")

    def start_on(broker: Broker) -> None:
        start(broker, db, window=settings.queue_window)
        _log.info("planner running")

    try:
        return serve(broker_factory(settings), start_on)
    finally:
        db.close()
