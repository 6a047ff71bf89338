"""A trial handed back by requeueing it, without the next agent counting a loss.

Why: with one broker user per role an agent may not publish to
``spotsweep.trials`` (docs/security.md), and a trial it republished would carry
its own ``user_id``, which every other agent refuses. So a draining agent (or
one whose node looks broken) hands a trial back with ``nack(requeue=True)``:
the planner's message, its validated ``user_id`` intact, stays in RabbitMQ.
RabbitMQ marks it ``redelivered``, which is also how a delivery lost with its
agent looks, and each lost delivery counts towards ``retries.max_lost``
(:func:`~.uploads.record_loss`).

The hand-back is therefore told apart in the artifact store, beside the loss
markers: before the requeue the agent writes one uniquely named empty
*hand-back marker* for the attempt; an agent given a redelivered delivery
records its loss marker as always and counts ``losses - hand-backs``
(:func:`unpaired_losses`). Each requeue is paired with the one redelivery it
causes, and unique names keep the counts race-free, as for the losses.
Only a hand-back of a *fresh* delivery writes a marker: a redelivered one that
is handed back again passes on the verdict about its earlier requeue (a loss
or a hand-back, whose marker is already there) unchanged, and its own requeue
costs nothing, so no marker is ever left over to excuse a later real loss.

The trial never leaves RabbitMQ, so it is never lost nor duplicated, and a
marker (forged or not) can only waive a loss count, never make anything run
(why not a "handed back" event the planner republishes: docs/security.md).
"""

from __future__ import annotations

import uuid

from spotsweep.services.agent import uploads
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.messages import TrialMessage

_log = log.get("spotsweep.agent")


def handback_prefix(sweep_id: str, trial_id: str, attempt: int) -> str:
    """One empty marker per requeue of an attempt that was a hand-back, not a loss."""
    return f"sweeps/{sweep_id}/trials/{trial_id}/handbacks/attempt-{attempt}/"


def unpaired_losses(lost: int, handed_back: int) -> int:
    """Redeliveries of an attempt that were losses: every one counted, less those a hand-back caused."""
    return max(0, lost - handed_back)


def record_handback(store: ArtifactStore, msg: TrialMessage) -> bool:
    """Mark one requeue of ``msg``'s attempt as a hand-back (before the requeue). One try, no
    backoff: a draining agent has little time, and a marker that cannot be written only costs
    one loss count later (logged here), never the trial."""
    try:
        store.put_bytes(handback_prefix(msg.sweep_id, msg.trial_id, msg.attempt) + uuid.uuid4().hex, b"")
        return True
    except (SpotsweepError, OSError) as e:
        _log.error("hand-back not marked: the next agent counts it as a lost delivery", error=str(e),
                   trial_id=msg.trial_id)
        return False


def count_loss(store: ArtifactStore, msg: TrialMessage) -> int:
    """For a redelivered delivery: record its loss marker, and return the attempt's losses so far
    less its hand-backs. A store that cannot be listed counts every loss (the safe side)."""
    lost = uploads.record_loss(store, msg)
    try:
        handed_back = len(store.list(handback_prefix(msg.sweep_id, msg.trial_id, msg.attempt)))
    except (SpotsweepError, OSError) as e:
        _log.error("hand-backs not counted: every redelivery counts as a loss", error=str(e), trial_id=msg.trial_id)
        return lost
    return unpaired_losses(lost, handed_back)
