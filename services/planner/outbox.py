"""The planner's outbox: trials written ``pending`` are published with confirms, then marked ``queued``.

A crash between the two leaves them ``pending``, and the next planner
publishes them at start. The one window for a duplicate trial message is a
crash after the broker confirmed a batch (at most 100) but before ``queued``
committed, or (a PostgreSQL crash) before that commit, which is not waited
for, reached the disk; the second run of that attempt to start is stopped by
the planner (``trial.stop``, reason ``duplicate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spotsweep.services.planner import store
from spotsweep.services.planner.exploit import copy_pending
from spotsweep.services.planner.ports import PgSweeps
from spotsweep.shared import topology
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.messages import TrialMessage, encode
from spotsweep.shared.naming import render_argv
from spotsweep.shared.spec import SweepSpec

if TYPE_CHECKING:
    from spotsweep.services.planner.handlers import PlannerDeps


def trial_message(row: dict[str, Any], spec: SweepSpec, progress: bool = False) -> TrialMessage:
    params = row["params"]
    extra = {"index": row["idx"], "trial_name": row["trial_name"]}
    return TrialMessage(
        sweep_id=row["sweep_id"],
        trial_id=row["trial_id"],
        attempt=row["attempt"],
        trial_name=row["trial_name"],
        index=row["idx"],
        params=params,
        argv=render_argv(spec.command, params, extra),
        env=dict(spec.env),
        metric=spec.metric.name,
        gpus=spec.resources.gpus,
        resource_class=spec.resources.resource_class,
        max_lost=spec.retries.max_lost,
        stall_timeout=spec.timeout.stall,
        total_timeout=spec.timeout.total,
        elapsed=float(row.get("run_seconds") or 0.0),
        progress=progress,
        limits=spec.limits,
        metric_mode=spec.metric.mode,
        checkpoint_keep=spec.checkpoints.keep,
        workdir_sha256=spec.workdir_sha256,
    )


def publish_pending(deps: PlannerDeps, sweep_id: str | None = None) -> int:
    """Publish the outbox (``pending`` trials) with confirms, then mark them queued.
    PBT's exploit copies go first: a trial is published only once its copy is done."""
    copy_pending(deps, sweep_id)
    published = 0
    while True:
        with deps.db.transaction() as conn:
            rows = store.pending_trials(conn, sweep_id)
            if not rows:
                return published
            out = []
            for row in rows:
                spec, search = deps.stored_spec(PgSweeps(conn), row["sweep_id"], row["spec_version"])
                deps.ensure_queue(spec.resources.resource_class)
                msg = trial_message(row, spec, progress=search.wants_progress and row["idx"] >= 0)
                out.append(
                    Outgoing(
                        topology.TRIALS_EXCHANGE,
                        spec.resources.resource_class,
                        encode(msg),
                        headers={"sweep_id": msg.sweep_id, "trial_id": msg.trial_id, "attempt": msg.attempt},
                        message_id=f"{msg.trial_id}#{msg.attempt}",
                        priority=spec.priority,  # the spec bounds it to the queues' 0..9
                    )
                )
            deps.broker.publish_many(out)
            store.mark_queued(conn, [r["trial_id"] for r in rows])
            published += len(rows)
        if len(rows) < store.PENDING_PAGE:
            return published  # a short page: nothing more was pending
