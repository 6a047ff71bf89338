"""When a running trial must be stopped, and how: a pure decision.

:func:`decide` takes what the supervisor knows at one poll (the run's stop
state, the agent's signals as plain values, the clock) and returns the new
state and what to do to the process: nothing, SIGTERM or SIGKILL. No
process, thread or clock is involved, so every rule is tested with plain
values (tests/services/agent/test_stop_policy.py). The rules, first match
wins:

* hard stop (second SIGTERM to the agent): SIGKILL now, the reason unchanged;
* a lost delivery: SIGKILL now, reason ``lost`` (no report);
* while the run is not already being ended for a reason of its own:
  the planner stopped this run (``stopped``), its sweep was cancelled
  (``cancelled``), no line for ``timeout.stall`` seconds (``stalled``), past
  the running time left of ``timeout.total`` (``timeout``): SIGKILL now;
* preemption: SIGTERM once (reason ``preempted``), SIGKILL after the grace.

The agent's signals, a lost connection, a cancelled sweep and the planner's
stops are set from other threads (the signal handler, the broker's I/O
thread, the control consumer) on a run's :class:`RunControls`, which a run
reads once per poll as plain :class:`Signals`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

Action = Literal["none", "term", "kill"]
# exited | preempted | cancelled | stopped | stalled | timeout | lost
Reason = str


@dataclass(frozen=True)
class Signals:
    """The agent's signals about one run, read once per poll."""

    kill: bool = False  # hard stop
    lost: bool = False  # the delivery's connection died
    stop: str | None = None  # the planner's reason to stop this run
    cancelled: bool = False  # its sweep was cancelled
    preempt: bool = False  # the node is going away


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


@dataclass(frozen=True)
class Limits:
    """The run's time limits, in seconds; None: no limit."""

    stall: float | None = None  # timeout.stall: longest silence
    budget: float | None = None  # what is left of timeout.total over all attempts
    grace: float = 90.0  # from SIGTERM to SIGKILL on preemption


@dataclass(frozen=True)
class StopState:
    """Where the run stands: why it is ending (``exited`` while nothing ended it) and the times the rules need."""

    started: float
    last_line: float
    reason: Reason = "exited"
    stop_reason: str | None = None
    term_sent_at: float | None = None


def decide(state: StopState, signals: Signals, now: float, limits: Limits) -> tuple[StopState, Action]:
    """The new state and the action to take on the trial's process group."""
    if signals.kill:
        return state, "kill"
    if signals.lost:
        return (state, "none") if state.reason == "lost" else (replace(state, reason="lost"), "kill")
    if state.reason not in ("exited", "preempted"):
        return state, "none"  # already killed for a reason of its own
    if signals.stop is not None:
        return replace(state, reason="stopped", stop_reason=signals.stop), "kill"
    if signals.cancelled:
        return replace(state, reason="cancelled"), "kill"
    if state.reason == "exited":
        if limits.stall is not None and now - state.last_line > limits.stall:
            return replace(state, reason="stalled"), "kill"
        if limits.budget is not None and now - state.started > limits.budget:
            return replace(state, reason="timeout"), "kill"
    if signals.preempt:
        if state.term_sent_at is None:
            return replace(state, reason="preempted", term_sent_at=now), "term"
        if now - state.term_sent_at > limits.grace:
            return state, "kill"
    return state, "none"
