"""``spotsweep planner``: the thin process around the planner handlers."""

from __future__ import annotations

from functools import partial

from spotsweep.services.planner.handlers import PlannerDeps, handle_events, handle_sweep_message, publish_pending
from spotsweep.services.planner.policy import Policy
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database, required_database
from spotsweep.shared.runtime import Cleanup, broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import PlannerSettings, default
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

    def start_on(broker: Broker) -> Cleanup:
        deps = start(broker, db, window=settings.queue_window, store=store, policy=policy)
        _log.info("planner running")
        return deps.close

    try:
        return serve(broker_factory(settings), start_on)
    finally:
        db.close()
