"""The planner's decisions as pure functions: ``decide(state, event) -> Decision``.

No I/O, no clock: the handlers read the state from PostgreSQL, call these,
and apply the result in the same transaction. Tests feed plain values.
Fencing lives here: an event whose attempt is not the trial's current
attempt, or about a trial already in a terminal state, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotsweep.shared.messages import TrialFinished, TrialStarted
from spotsweep.shared.states import IN_FLIGHT, TrialState, check_transition


@dataclass(frozen=True)
class SweepState:
    max_concurrent: int
    total_trials: int
    next_index: int  # configs [0, next_index) have trial rows
    in_flight: int  # trials pending, queued or running
    max_failures: int
    active: bool = True  # False once cancelled or completed


@dataclass(frozen=True)
class TrialView:
    state: TrialState
    attempt: int
    failures: int = 0
    preemptions: int = 0


@dataclass(frozen=True)
class TrialUpdate:
    state: TrialState
    attempt: int
    failures: int
    preemptions: int
    metrics: dict[str, float] | None = None
    error: str | None = None
    started: bool = False  # set started_at (first start only)
    finished: bool = False  # set finished_at
    agent: str | None = None


@dataclass(frozen=True)
class Decision:
    update: TrialUpdate | None = None
    launch: int = 0  # new configs to launch now
    sweep_done: bool = False
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def fill(sweep: SweepState, in_flight: int | None = None) -> tuple[int, bool]:
    """How many new trials to launch, and whether the sweep is then done."""
    busy = sweep.in_flight if in_flight is None else in_flight
    if not sweep.active:
        return 0, False
    remaining = sweep.total_trials - sweep.next_index
    launch = max(0, min(sweep.max_concurrent - busy, remaining))
    done = remaining - launch == 0 and busy + launch == 0
    return launch, done


def decide(sweep: SweepState, trial: TrialView, event: TrialStarted | TrialFinished) -> Decision:
    """What the planner does about one lifecycle event of one trial."""
    if trial.state.is_terminal:
        return Decision(reason=f"trial already {trial.state.value}")
    if event.attempt != trial.attempt:
        return Decision(reason=f"stale attempt {event.attempt} (current {trial.attempt})")

    update: TrialUpdate | None
    if isinstance(event, TrialStarted):
        if trial.state == TrialState.RUNNING:
            return Decision(reason="already running")
        update = TrialUpdate(
            check_transition(trial.state, TrialState.RUNNING), trial.attempt, trial.failures,
            trial.preemptions, started=True, agent=event.agent,
        )
    else:
        update = _finished(sweep, trial, event)
        check_transition(trial.state, update.state)

    was_busy = trial.state in IN_FLIGHT
    now_busy = update.state in IN_FLIGHT
    in_flight = sweep.in_flight - int(was_busy) + int(now_busy)
    launch, done = fill(sweep, in_flight)
    return Decision(update=update, launch=launch, sweep_done=done)


def _finished(sweep: SweepState, trial: TrialView, event: TrialFinished) -> TrialUpdate:
    # Every ended attempt carries its last values; the store merges them in
    # attempt order, so final metrics are the last value of each name over
    # all attempts (a resumed attempt need not re-report what came before).
    metrics, agent = event.metrics or None, event.agent or None
    if event.outcome == "completed":
        return TrialUpdate(TrialState.COMPLETED, trial.attempt, trial.failures, trial.preemptions, finished=True, metrics=metrics, agent=agent)
    if event.outcome == "cancelled":
        return TrialUpdate(TrialState.CANCELLED, trial.attempt, trial.failures, trial.preemptions, error=event.error, finished=True, metrics=metrics, agent=agent)
    if event.outcome == "preempted":
        # Not a failure: the trial goes back with a new attempt and resumes
        # from its last checkpoint. The retry budget is untouched.
        return TrialUpdate(TrialState.PENDING, trial.attempt + 1, trial.failures, trial.preemptions + 1, error=event.error, metrics=metrics, agent=agent)
    failures = trial.failures + 1
    if failures <= sweep.max_failures and sweep.active:
        return TrialUpdate(TrialState.PENDING, trial.attempt + 1, failures, trial.preemptions, error=event.error, metrics=metrics, agent=agent)
    return TrialUpdate(TrialState.FAILED, trial.attempt, failures, trial.preemptions, error=event.error, finished=True, metrics=metrics, agent=agent)
