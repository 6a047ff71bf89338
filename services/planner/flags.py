"""The anomaly flags the planner stores: the names and the preemption rule.

The agent raises the live ones as a run goes on
(:mod:`spotsweep.services.agent.anomalies`, sent on ``trial.progress``;
:func:`~.decide.live` stores them); the planner itself sees preemptions.
Flags are merged into ``trials.flags`` each once, so a redelivered event
changes nothing.
"""

from __future__ import annotations

PREEMPTED_OFTEN = 3  # `preempted_often` from this many preemptions on
LIVE_FLAGS = frozenset({"nan", "stalled", "diverging", "idle_gpu"})  # what a progress event may raise


def preemption_flags(flags: tuple[str, ...] | None, preemptions: int) -> tuple[str, ...] | None:
    """``flags`` with ``preempted_often`` added once the trial has been preempted :data:`PREEMPTED_OFTEN` times."""
    if preemptions < PREEMPTED_OFTEN:
        return flags
    return tuple(dict.fromkeys((*(flags or ()), "preempted_often")))

