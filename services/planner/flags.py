"""The anomaly flags the planner stores: the names and the preemption rule.

The agent raises ``nan``, ``stalled``, ``diverging`` and ``idle_gpu`` while a
run goes on (:mod:`spotsweep.services.agent.anomalies`) and sends each as it
rises on a ``trial.progress`` event; :func:`~.decide.live` turns those into an update
of the trial's ``flags``. The planner itself sees preemptions:
:func:`preemption_flags` adds ``preempted_often`` from
:data:`PREEMPTED_OFTEN` preemptions on. Flags are merged into
``trials.flags`` each once (set semantics: a redelivered event changes
nothing), next to what the agent skipped or cut (``skipped_lines``, ...).
"""

from __future__ import annotations

PREEMPTED_OFTEN = 3  # `preempted_often` from this many preemptions on
LIVE_FLAGS = frozenset({"nan", "stalled", "diverging", "idle_gpu"})  # what a progress event may raise


def preemption_flags(flags: tuple[str, ...] | None, preemptions: int) -> tuple[str, ...] | None:
    """``flags`` with ``preempted_often`` added once the trial has been preempted :data:`PREEMPTED_OFTEN` times."""
    if preemptions < PREEMPTED_OFTEN:
        return flags
    return tuple(dict.fromkeys((*(flags or ()), "preempted_often")))

