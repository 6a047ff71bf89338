"""Per-run controls: what one running trial is told by the rest of the agent.

The agent's signals (preempt, hard stop), the run's connection being lost,
its sweep being cancelled and the planner's stops are set from other threads
(the signal handler, the broker's I/O thread, the control consumer). A run
reads them once per poll, as plain values (:meth:`RunControls.signals`), for
the pure :func:`~.stop_policy.decide`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from spotsweep.services.agent.stop_policy import Signals


@dataclass(frozen=True)
class RunControls:
    """The controls of one run; the events are shared with the agent (preempt,
    kill) and with the run's broker connection (lost)."""

    preempt: threading.Event = field(default_factory=threading.Event)  # SIGTERM the trial, wait for grace
    kill: threading.Event = field(default_factory=threading.Event)  # SIGKILL now
    lost: threading.Event = field(default_factory=threading.Event)  # the delivery's connection died: SIGKILL, no report
    grace: float = 90.0
    cancelled: Callable[[], bool] = lambda: False  # the run's sweep was cancelled
    stopped: Callable[[str], str | None] = lambda run_id: None  # the planner's stop reason for a run, if any

    def signals(self, run_id: str) -> Signals:
        """What the controls say now about run ``run_id``, as plain values."""
        return Signals(kill=self.kill.is_set(), lost=self.lost.is_set(), stop=self.stopped(run_id),
                       cancelled=self.cancelled(), preempt=self.preempt.is_set())
