"""The anomaly flags the planner stores: pure decisions.

The agent raises ``nan``, ``stalled``, ``diverging`` and ``idle_gpu`` while a
run goes on (:mod:`spotsweep.services.agent.anomalies`) and sends each as it
rises on a ``trial.progress`` event; :func:`live` turns those into an update
of the trial's ``flags``. The planner itself sees preemptions:
:func:`preemption_flags` adds ``preempted_often`` from
:data:`PREEMPTED_OFTEN` preemptions on. Flags are merged into
``trials.flags`` each once (set semantics: a redelivered event changes
nothing), next to what the agent skipped or cut (``skipped_lines``, ...).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # decide.py imports this module
    from spotsweep.services.planner.decide import Decision, TrialView

PREEMPTED_OFTEN = 3  # `preempted_often` from this many preemptions on
LIVE_FLAGS = frozenset({"nan", "stalled", "diverging", "idle_gpu"})  # what a progress event may raise


def preemption_flags(flags: tuple[str, ...] | None, preemptions: int) -> tuple[str, ...] | None:
    """``flags`` with ``preempted_often`` added once the trial has been preempted :data:`PREEMPTED_OFTEN` times."""
    if preemptions < PREEMPTED_OFTEN:
        return flags
    return tuple(dict.fromkeys((*(flags or ()), "preempted_often")))


def live(trial: TrialView, flags: list[str], decision: Decision) -> Decision:
    """``decision`` about a running trial's progress, also raising the agent's ``flags``
    (only known anomaly names: the event's body is untrusted)."""
    from spotsweep.services.planner.decide import TrialUpdate

    raised = tuple(dict.fromkeys(f for f in flags if f in LIVE_FLAGS))
    if not raised:
        return decision
    u = decision.update
    if u is None:
        u = TrialUpdate(trial.state, trial.attempt, trial.failures, trial.preemptions, flags=raised)
    else:
        u = replace(u, flags=tuple(dict.fromkeys((*(u.flags or ()), *raised))))
    return replace(decision, update=u)
