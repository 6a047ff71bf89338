"""What the planner sends once a transaction has committed, in one place.

Sending before the commit could tell agents about decisions that then roll
back; so a decision returns :class:`Effects` and :func:`send` sends them
after. The sweep's outbox is always drained: if an earlier delivery of the
same events committed but failed to publish, its redelivery decides nothing
new and must still publish.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotsweep.services.planner.context import PlannerDeps
from spotsweep.services.planner.decide import Decision
from spotsweep.services.planner.outbox import publish_pending
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.retention import delete_all
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.messages import CancelSweep, StopTrial, encode


_log = log.get("spotsweep.planner")


@dataclass
class Effects:
    """One sweep's messages to send after its transaction committed."""

    sweep_id: str
    stops: list[StopTrial] = field(default_factory=list)  # runs that must not go on
    cancel: bool = False  # (re-)broadcast the sweep's cancel to every agent
    publish: bool = True  # drain the sweep's outbox
    discard: list[str] = field(default_factory=list)  # trials pruned after their run ended: their checkpoints go


def stop_of(sweep_id: str, trial_id: str, decision: Decision) -> StopTrial | None:
    """The stop a decision asks for, if any."""
    if decision.stop is None:
        return None
    return StopTrial(sweep_id=sweep_id, trial_id=trial_id, attempt=decision.stop.attempt, run_id=decision.stop.run_id,
                     reason=decision.stop.reason)


def send(deps: PlannerDeps, effects: Effects) -> None:
    """Cancel, then stops, then the outbox: what the decisions committed asked for."""
    if effects.cancel:
        deps.broker.publish(Outgoing(topology.CONTROL_EXCHANGE, "", encode(CancelSweep(sweep_id=effects.sweep_id))))
    for stop in effects.stops:
        _log.info("stopping a run", trial_id=stop.trial_id, run_id=stop.run_id, reason=stop.reason)
        deps.broker.publish(Outgoing(topology.CONTROL_EXCHANGE, "", encode(stop)))
    if effects.publish:
        publish_pending(deps, effects.sweep_id)
    if effects.discard:
        discard_checkpoints(deps, effects.sweep_id, effects.discard)


def discard_checkpoints(deps: PlannerDeps, sweep_id: str, trial_ids: list[str]) -> None:
    """Delete the checkpoints of trials successive halving pruned at a rung they
    reached by ending their run: no agent holds them any more, and nothing
    resumes a pruned trial. Best effort, after the commit: a planner that dies
    first leaves those checkpoints in the store (the decision is not made
    again), and an unreachable store only costs space, so neither is retried."""
    if deps.store is None:
        _log.info("checkpoints of pruned trials kept: the planner has no artifact store (SPOTSWEEP_S3_*)",
                  trials=len(trial_ids))
        return
    for trial_id in trial_ids:
        try:
            deleted = delete_all(deps.store, sweep_id, trial_id)
        except SpotsweepError as e:
            _log.warning("could not delete a pruned trial's checkpoints", trial_id=trial_id, error=str(e))
        else:
            _log.info("deleted a pruned trial's checkpoints", trial_id=trial_id, keys=deleted)
