"""``spotsweep planner``: the thin process around the planner handlers."""

from __future__ import annotations

from functools import partial

from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.handlers import handle_events, handle_sweep_message, publish_pending
from spotsweep.services.planner.policy import Policy
from spotsweep.services.planner.reconciler import Reconciler
from spotsweep.shared import log, metrics, topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database, required_database
from spotsweep.shared.health import Check, probes
from spotsweep.shared.health_startup import (
    CurrentBroker, broker_check, database_check, first_broker, reusing, wait_for_database,
)
from spotsweep.shared.metrics_broker import SeenClasses, TrialsCounted, depths
from spotsweep.shared.runtime import Cleanup, broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import PlannerSettings, default
from spotsweep.shared.states import IN_FLIGHT, TERMINAL
from spotsweep.shared.tls import pg_options

_log = log.get("spotsweep.planner")
EVENT_BATCH = 64


def start(broker: Broker, db: Database, resource_classes: tuple[str, ...] = ("gpu",),
          window: int | None = default(PlannerSettings, "queue_window"), store: ArtifactStore | None = None,
          policy: Policy | None = None) -> PlannerDeps:
    """Declare, migrate, recover the outbox, and start consuming. Used by local mode too.
    ``store``: where the checkpoints of trials pruned at a rung are deleted (none: they stay);
    ``policy``: who may submit and what may run (none: anyone, anything)."""
    broker.declare(topology.service_queues(resource_classes))
    with_startup_retries(db.migrate, "migrate the database")
    deps = PlannerDeps(db=db, broker=broker, window=window, store=store, policy=policy or Policy())
    recovered = with_startup_retries(lambda: publish_pending(deps), "publish pending trials")
    if recovered:
        _log.info("published trials left pending by a previous planner", trials=recovered)
    # Settled by the dispatcher's one policy (shared/broker/dispatch.py), as every consumer is.
    broker.consume(topology.SWEEPS_QUEUE, partial(handle_sweep_message, deps=deps), prefetch=1)
    # Events in batches: whatever arrived while the last batch was decided (no
    # waiting: max_wait 0), one transaction per sweep in it.
    batcher = BatchingHandler(partial(handle_events, deps=deps), max_batch=EVENT_BATCH, max_wait=0.0, name="planner-events")
    broker.consume(topology.PLANNER_EVENTS_QUEUE, batcher, prefetch=EVENT_BATCH * 2)
    deps.batchers.append(batcher)
    return deps


def main(settings: PlannerSettings) -> int:
    db = required_database(settings.database_url, "planner", pg_options(settings))
    # S3 is optional here: with it, checkpoints of trials pruned at a rung are deleted (retention).
    store = S3ArtifactStore.from_settings(settings) if settings.s3_endpoint else None
    if store is None:
        _log.warning("no SPOTSWEEP_S3_ENDPOINT: checkpoints of trials pruned at a rung will stay in the bucket")

    policy = Policy.of(settings.submitters, settings.allowed_commands)
    if policy.submitters is None:
        _log.warning("SPOTSWEEP_SUBMITTERS is not set: any broker user that may post to spotsweep.sweeps submits sweeps")

    # --metrics-port: the probes answer (503) while we still wait for RabbitMQ and PostgreSQL below.
    metrics.export(metrics.PLANNER)
    current, classes = CurrentBroker(), SeenClasses("gpu")
    reconciler = Reconciler()  # PostgreSQL against the broker: what a broker that lost its data forgot
    probes(settings.metrics_host, settings.metrics_port, {
        "rabbitmq": sampling(broker_check(current, topology.SWEEPS_QUEUE), current, classes),
        "postgresql": database_check(db.url, db.options, query=sample_trials),
    })
    wait_for_database(db, settings.startup_timeout)  # first: an idle connection to RabbitMQ would miss heartbeats
    first = first_broker(settings, settings.startup_timeout)

    def start_on(broker: Broker) -> Cleanup:
        deps = start(TrialsCounted(broker, classes), db, window=settings.queue_window, store=store, policy=policy)
        current.broker = broker
        _log.info("planner running")
        stop_reconciling = reconciler.attach(deps)  # now, after every reconnection, and periodically

        def cleanup() -> None:
            stop_reconciling()
            deps.close()

        return cleanup

    try:
        return serve(reusing(first, broker_factory(settings)), start_on)
    finally:
        db.close()


def sample_trials(db: Database) -> None:
    """``spotsweep_trials_in_flight`` and ``spotsweep_trials_finished_total{state}`` from the trials table
    (the readiness check's query: a database that answers it is one the planner can use)."""
    with db.transaction() as conn:
        rows = conn.execute("SELECT state, count(*) AS n FROM trials GROUP BY state").fetchall()
    counts = {str(r["state"]): float(r["n"]) for r in rows}
    metrics.TRIALS_IN_FLIGHT.set({"": sum(counts.get(s.value, 0.0) for s in IN_FLIGHT)})
    metrics.TRIALS_FINISHED.set({s.value: counts.get(s.value, 0.0) for s in TERMINAL})


def sampling(check: Check, current: CurrentBroker, classes: SeenClasses) -> Check:
    """The broker check, then ``spotsweep_queue_depth{class}`` of the classes published to (and gpu)."""

    def run() -> None:
        check()
        if current.broker is not None:
            metrics.QUEUE_DEPTH.set(depths(current.broker, classes))

    return run
