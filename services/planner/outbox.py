"""The planner's outbox: trials written ``pending`` are published with confirms, then marked ``queued``.

A crash between the two leaves them ``pending``, and the next planner
publishes them at start. The one window for a duplicate trial message is a
crash after the broker confirmed a batch (at most 100) but before ``queued``
committed, or (a PostgreSQL crash) before that commit, which is not waited
for, reached the disk; the second run of that attempt to start is stopped by
the planner (``trial.stop``, reason ``duplicate``).
"""

from __future__ import annotations

from typing import Any

from spotsweep.services.planner import store
from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.exploit import copy_pending
from spotsweep.services.planner.ports import TrialRepository
from spotsweep.shared import topology
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.artifacts.checkpoint_layout import _FOLDER_NAME, checkpoint_prefix
from spotsweep.shared.messages import ResumeFrom, TrialMessage, encode
from spotsweep.shared.naming import render_argv
from spotsweep.shared.spec import SweepSpec



def resume_points(trials: TrialRepository, rows: list[dict[str, Any]]) -> dict[str, ResumeFrom]:
    """What each row's attempt resumes from (``TrialMessage.resume_from``), so the agent need not list S3.

    A trial that never started has no checkpoint (``ResumeFrom()``); the others get the
    newest journaled checkpoint under the trial's own prefix, or are left out (the agent
    lists, as it does for a checkpoint the journal has not caught up with)."""
    fresh = {r["trial_id"] for r in rows if r.get("started_at") is None and r.get("run_id") is None}
    known = {trial_id: ResumeFrom() for trial_id in fresh}
    ran = [r["trial_id"] for r in rows if r["trial_id"] not in fresh]
    if not ran:
        return known  # the common case: first attempts, no query at all
    for row in trials.newest_checkpoints(ran):
        uri = str(row["uri"] or "").rstrip("/")
        folder = uri.rsplit("/", 1)[-1]
        if _FOLDER_NAME.match(folder) and uri.endswith("/" + checkpoint_prefix(row["sweep_id"], row["trial_id"]) + folder):
            known[row["trial_id"]] = ResumeFrom(folder=folder, step=int(folder[:12]))
    return known


def trial_message(row: dict[str, Any], spec: SweepSpec, progress: bool = False,
                  resume_from: ResumeFrom | None = None) -> TrialMessage:
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
        cpus=spec.resources.cpus,
        memory=spec.resources.memory,
        max_lost=spec.retries.max_lost,
        stall_timeout=spec.timeout.stall,
        total_timeout=spec.timeout.total,
        elapsed=float(row.get("run_seconds") or 0.0),
        progress=progress,
        limits=spec.limits,
        metric_mode=spec.metric.mode,
        checkpoint_keep=spec.checkpoints.keep,
        workdir_sha256=spec.workdir_sha256,
        resume_from=resume_from,
        setup_pip=spec.setup.pip if spec.setup is not None else None,
        inputs=spec.inputs,
        image=spec.image,
        network=spec.network,
        shm=spec.resources.shm,
    )


def publish_priority(sweep_priority: int, attempt: int) -> int:
    """A later attempt (a preempted or lost run resuming from its checkpoint, a
    promotion, a retry) goes one level above its sweep's new trials: put back
    behind every fresh trial queued meanwhile, a trial stopped by a spot notice
    waited up to (max_concurrent - slots) / slots trial lengths to resume
    (measured by bench/goodput.py). Within 0..9, the queues' range (the spec
    bounds a sweep's priority to it)."""
    return min(topology.MAX_PRIORITY, sweep_priority + (1 if attempt > 1 else 0))


def publish_pending(deps: PlannerDeps, sweep_id: str | None = None) -> int:
    """Publish the outbox (``pending`` trials) with confirms, then mark them queued.
    PBT's exploit copies go first: a trial is published only once its copy is done."""
    copy_pending(deps, sweep_id)
    published = 0
    while True:
        with deps.unit() as uow:
            rows = uow.trials.pending(sweep_id)
            if not rows:
                return published
            out = []
            resume = resume_points(uow.trials, rows)
            for row in rows:
                spec, search = deps.stored_spec(uow.sweeps, row["sweep_id"], row["spec_version"])
                deps.ensure_queue(spec.resources.resource_class)
                msg = trial_message(row, spec, progress=search.wants_progress and row["idx"] >= 0,
                                    resume_from=resume.get(row["trial_id"]))
                out.append(
                    Outgoing(
                        topology.TRIALS_EXCHANGE,
                        spec.resources.resource_class,
                        encode(msg),
                        headers={"sweep_id": msg.sweep_id, "trial_id": msg.trial_id, "attempt": msg.attempt},
                        message_id=f"{msg.trial_id}#{msg.attempt}",
                        priority=publish_priority(spec.priority, msg.attempt),
                    )
                )
            deps.broker.publish_many(out)
            uow.trials.mark_queued([r["trial_id"] for r in rows])
            published += len(rows)
        if len(rows) < store.PENDING_PAGE:
            return published  # a short page: nothing more was pending
