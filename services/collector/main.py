"""``spotsweep collector``: the thin process around the collector handlers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from spotsweep.services.collector.handlers import write_events
from spotsweep.shared import log, metrics, topology
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.port import Broker, Delivery
from spotsweep.shared.db import Database, required_database
from spotsweep.shared.health import probes
from spotsweep.shared.health_startup import (
    CurrentBroker, broker_check, database_check, first_broker, reusing, wait_for_database,
)
from spotsweep.shared.messages import decode
from spotsweep.shared.runtime import Cleanup, broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import CollectorSettings, Settings
from spotsweep.shared.tls import pg_options

_log = log.get("spotsweep.collector")
MAX_BATCH = 500


def measured_batch(deliveries: Sequence[Delivery], db: Database) -> None:
    """The collector's batch handler: decode and write the batch (an undecodable message raises, so the
    batching wrapper isolates and dead-letters it), timed and counted: ``spotsweep_ingest_batch_seconds``
    and ``spotsweep_points_ingested_total`` (new points only; a failed batch counts nothing)."""
    began = time.perf_counter()
    inserted = write_events([decode(d.body) for d in deliveries], db)
    metrics.INGEST_BATCH_SECONDS.observe(time.perf_counter() - began)
    metrics.POINTS_INGESTED.inc(inserted)


def start(broker: Broker, db: Database, max_batch: int = MAX_BATCH, max_wait: float = 0.05) -> BatchingHandler:
    broker.declare(topology.service_queues())
    with_startup_retries(db.migrate, "migrate the database")
    batcher = BatchingHandler(partial(measured_batch, db=db), max_batch=max_batch, max_wait=max_wait)
    broker.consume(topology.COLLECTOR_QUEUE, batcher, prefetch=max_batch * 2)
    return batcher


def main(settings: Settings) -> int:
    assert isinstance(settings, CollectorSettings)  # the CLI loads the collector's model
    db = required_database(settings.database_url, "collector", pg_options(settings))
    metrics.export(metrics.COLLECTOR)
    current = CurrentBroker()  # --metrics-port: the probes answer (503) while we wait for RabbitMQ and PostgreSQL
    probes(settings.metrics_host, settings.metrics_port, {
        "rabbitmq": broker_check(current, topology.COLLECTOR_QUEUE), "postgresql": database_check(db.url, db.options)})
    wait_for_database(db, settings.startup_timeout)  # first: an idle connection to RabbitMQ would miss heartbeats
    first = first_broker(settings, settings.startup_timeout)

    def start_on(broker: Broker) -> Cleanup:
        batcher = start(broker, db)
        current.broker = broker
        _log.info("collector running")
        return batcher.close  # flush what is buffered; unacked leftovers are redelivered anyway

    try:
        return serve(reusing(first, broker_factory(settings)), start_on)
    finally:
        db.close()
