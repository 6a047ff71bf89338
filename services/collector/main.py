"""``spotsweep collector``: the thin process around the collector handlers."""

from __future__ import annotations

from functools import partial

from spotsweep.services.collector.handlers import CollectorDeps, handle_batch
from spotsweep.shared import log, topology
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database, required_database
from spotsweep.shared.runtime import Cleanup, broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import Settings
from spotsweep.shared.tls import pg_options

_log = log.get("spotsweep.collector")
MAX_BATCH = 500


def start(broker: Broker, db: Database, max_batch: int = MAX_BATCH, max_wait: float = 0.05) -> BatchingHandler:
    broker.declare(topology.service_queues())
    with_startup_retries(db.migrate, "migrate the database")
    batcher = BatchingHandler(partial(handle_batch, deps=CollectorDeps(db)), max_batch=max_batch, max_wait=max_wait)
    broker.consume(topology.COLLECTOR_QUEUE, batcher, prefetch=max_batch * 2)
    return batcher


def main(settings: Settings) -> int:
    db = required_database(settings.database_url, "collector", pg_options(settings))

    def start_on(broker: Broker) -> Cleanup:
        batcher = start(broker, db)
        _log.info("collector running")
        return batcher.close  # flush what is buffered; unacked leftovers are redelivered anyway

    try:
        return serve(broker_factory(settings), start_on)
    finally:
        db.close()
