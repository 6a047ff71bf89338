"""The planner's decisions as pure functions: ``decide(state, event) -> Decision``.

No I/O, no clock: the handlers read the state from PostgreSQL, call these,
and apply the result in the same transaction. Tests feed plain values.

Fencing lives here (docs/faults.md: attempts and runs). An event of an
attempt that is not the trial's current one, or about an ended trial,
changes nothing; a run that starts for either is stopped, since it would
only redo work and move the trial's checkpoint. The broker may hand one
attempt out twice, so runs are told apart by ``run_id`` and only one counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from spotsweep.services.planner.flags import LIVE_FLAGS, preemption_flags
from spotsweep.services.planner.same_error import same_error
from spotsweep.services.planner.search.rungs import Action, StepDecision
from spotsweep.services.planner.untrusted import pg_text
from spotsweep.shared.messages import StopReason, TrialFinished, TrialLost, TrialStarted
from spotsweep.shared.states import TrialState, check_transition



@dataclass(frozen=True)
class RetryPolicy:
    """The spec's ``retries`` block, as the decisions need it."""

    max_failures: int = 3
    on_oom: str = "fail"  # fail | halve_batch
    batch_param: str = "batch_size"
    accum_param: str = "grad_accum"


@dataclass(frozen=True)
class SweepState:
    max_concurrent: int
    total_trials: int
    next_index: int  # configs [0, next_index) have trial rows
    in_flight: int  # trials pending, queued or running
    max_failures: int
    active: bool = True  # False once cancelled or completed
    policy: RetryPolicy | None = None  # None: max_failures alone
    waiting: int = 0  # of those in flight, launched but not started (pending or queued)
    window: int | None = None  # at most this many waiting at once (fair sharing between sweeps); None: no limit

    @property
    def retry(self) -> RetryPolicy:
        return self.policy or RetryPolicy(max_failures=self.max_failures)


@dataclass(frozen=True)
class TrialView:
    state: TrialState
    attempt: int
    failures: int = 0
    preemptions: int = 0
    run_id: str | None = None  # the run of this attempt that counts
    params: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # as stored: the last attempt's failure (or a later note)
    last_step: int | None = None  # the highest step any attempt reported


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
    run_id: str | None = None  # replaces the current run id when set
    losses: int | None = None  # replaces the loss count when set (reset to 0 for a new attempt)
    params: dict[str, Any] | None = None  # new params for the next attempt (OOM halving, a promotion's budget)
    add_seconds: float = 0.0  # running time to add to the trial's total
    rungs: dict[int, float] | None = None  # successive-halving values to merge into the trial's rungs
    last_step: int | None = None  # the highest step a run reported: the trial keeps the largest (budget.max_steps)
    # What the agent skipped or cut from a run's output: merged into the trial's, without repeats.
    flags: tuple[str, ...] | None = None
    warnings: tuple[str, ...] | None = None


def merged(first: TrialUpdate, then: TrialUpdate) -> TrialUpdate | None:
    """One update that leaves the trial as ``first`` then ``then`` would (a short
    run's start and end, decided in one batch, written with one UPDATE); None
    when one cannot say it (``first`` completes the trial, which clears its
    error: ``then`` could not keep that). :func:`~.store.apply_update` semantics:
    set columns take the later value, merged ones (metrics, rungs) merge, time adds up."""
    if first.state == TrialState.COMPLETED:
        return None

    def later(name: str) -> Any:
        value = getattr(then, name)
        return getattr(first, name) if value is None else value

    def union(a: dict[Any, Any] | None, b: dict[Any, Any] | None) -> dict[Any, Any] | None:
        return None if a is None and b is None else {**(a or {}), **(b or {})}

    def both(name: str) -> tuple[str, ...] | None:
        a, b = getattr(first, name), getattr(then, name)
        return None if a is None and b is None else tuple(dict.fromkeys((*(a or ()), *(b or ()))))

    return TrialUpdate(
        then.state, then.attempt, then.failures, then.preemptions, metrics=union(first.metrics, then.metrics),
        error=later("error"), started=first.started or then.started, finished=first.finished or then.finished,
        agent=later("agent"), run_id=later("run_id"), losses=later("losses"), params=later("params"),
        add_seconds=first.add_seconds + then.add_seconds, rungs=union(first.rungs, then.rungs),
        last_step=max((s for s in (first.last_step, then.last_step) if s is not None), default=None),
        flags=both("flags"), warnings=both("warnings"),
    )


@dataclass(frozen=True)
class Stop:
    """Stop one run of an attempt (see :class:`~spotsweep.shared.messages.StopTrial`)."""

    attempt: int
    run_id: str
    reason: StopReason


@dataclass(frozen=True)
class Decision:
    """What to change on the trial and which run to stop. What to launch next
    is :func:`fill`'s, on the sweep's counts once the update is applied."""

    update: TrialUpdate | None = None
    stop: Stop | None = None
    reason: str = ""


def fill(sweep: SweepState) -> tuple[int, bool]:
    """How many new trials to launch, and whether the sweep is then done.

    At most ``max_concurrent`` in flight, and at most ``window`` of them
    waiting in the queue: a sweep then keeps only a few trials ahead of the
    agents, so sweeps of equal priority take turns on the slots instead of
    the first one's backlog taking them all.
    """
    if not sweep.active:
        return 0, False
    remaining = sweep.total_trials - sweep.next_index
    room = sweep.max_concurrent - sweep.in_flight
    if sweep.window is not None:
        room = min(room, sweep.window - sweep.waiting)
    launch = max(0, min(room, remaining))
    done = remaining - launch == 0 and sweep.in_flight + launch == 0
    return launch, done


@dataclass(frozen=True)
class RunEnd:
    """What the search decided when a run completed (successive halving with a
    budget parameter): promote it to a larger budget, prune it, or complete it."""

    verdict: StepDecision
    value: float  # the objective the decision used (recorded at the rung)
    budget_param: str | None = None


def decide(sweep: SweepState, trial: TrialView, event: TrialStarted | TrialFinished | TrialLost,
           run_end: RunEnd | None = None) -> Decision:
    """What the planner does about one lifecycle event of one trial.

    ``run_end``: for a completed run, the search's decision at its end; None
    when the sweep has no such decision (the trial then completes).
    """
    starts = isinstance(event, TrialStarted) and bool(event.run_id) and event.attempt <= trial.attempt
    if trial.state.is_terminal:
        if starts:
            # A run of an ended trial (its finished run's ack was lost with
            # the agent): it would only redo finished work.
            return Decision(stop=Stop(event.attempt, event.run_id, "ended"), reason=f"trial already {trial.state.value}")
        return Decision(reason=f"trial already {trial.state.value}")
    if trial.state == TrialState.PAUSED:
        # Its run ended at a rung and it waits for a promotion: an event about that run is told again.
        if starts:
            return Decision(stop=Stop(event.attempt, event.run_id, "ended"), reason="trial waits at its rung")
        return Decision(reason="trial waits at its rung for a promotion")
    if event.attempt != trial.attempt:
        reason = f"stale attempt {event.attempt} (current {trial.attempt})"
        if starts:
            # The broker handed an earlier attempt out again (its agent died
            # before the ack): the current attempt is the one that counts.
            return Decision(stop=Stop(event.attempt, event.run_id, "stale"), reason=reason)
        return Decision(reason=reason)
    if not isinstance(event, TrialStarted) and not counted_run(trial, event):
        return Decision(reason=f"run {event.run_id} is not the trial's current run {trial.run_id}")

    if isinstance(event, TrialStarted):
        return _started(sweep, trial, event)
    if isinstance(event, TrialLost):
        return _lost(trial, event)
    update = _finished(sweep, trial, event, run_end)
    check_transition(trial.state, update.state)
    return Decision(update=update)


def counted_run(trial: TrialView, event: TrialFinished | TrialLost) -> bool:
    """Whether an end or loss of the current attempt is about the run that
    counts: while the trial runs, only its current run's (an event or a
    trial without a run id, from an older agent, is not told apart)."""
    return trial.state != TrialState.RUNNING or not event.run_id or not trial.run_id or event.run_id == trial.run_id


def prune(trial: TrialView, reason: str, metrics: dict[str, float], rungs: dict[int, float] | None = None) -> Decision:
    """Early stopping ends a running trial: it is pruned, and its run is stopped."""
    if not trial.run_id:
        return Decision(reason="no run to stop")
    update = TrialUpdate(check_transition(trial.state, TrialState.PRUNED), trial.attempt, trial.failures,
                         trial.preemptions, metrics=metrics, error=reason, finished=True, rungs=rungs or None)
    return Decision(update=update, stop=Stop(trial.attempt, trial.run_id, "pruned"), reason=reason)


def record_rungs(trial: TrialView, rungs: dict[int, float]) -> Decision:
    """A running trial passed successive-halving rungs and goes on: keep the values decided at them."""
    return Decision(update=TrialUpdate(trial.state, trial.attempt, trial.failures, trial.preemptions, rungs=rungs))


def live(trial: TrialView, flags: list[str], decision: Decision) -> Decision:
    """``decision`` about a running trial's progress, also raising the agent's ``flags``
    (only known anomaly names: the event's body is untrusted)."""
    raised = tuple(dict.fromkeys(f for f in flags if f in LIVE_FLAGS))
    if not raised:
        return decision
    u = decision.update
    if u is None:
        u = TrialUpdate(trial.state, trial.attempt, trial.failures, trial.preemptions, flags=raised)
    else:
        u = replace(u, flags=tuple(dict.fromkeys((*(u.flags or ()), *raised))))
    return replace(decision, update=u)


def _started(sweep: SweepState, trial: TrialView, event: TrialStarted) -> Decision:
    if trial.state == TrialState.RUNNING:
        if event.run_id == (trial.run_id or ""):
            return Decision(reason="already running")  # the same start event, delivered again
        if not event.redelivered:
            # A second copy of a live attempt (a publish repeated after a
            # planner crash): the run we know keeps going, this one stops.
            return Decision(stop=Stop(event.attempt, event.run_id, "duplicate"), reason="duplicate run")
        # Redelivered: the broker took the attempt from a vanished agent.
    update = TrialUpdate(
        check_transition(trial.state, TrialState.RUNNING), trial.attempt, trial.failures, trial.preemptions,
        started=True, agent=event.agent, run_id=event.run_id,
        # A redelivery's agent counted the attempt's losses; a fresh delivery keeps the count (local resume's orphans).
        losses=event.losses if event.redelivered else None,
    )
    return Decision(update=update)


def _lost(trial: TrialView, event: TrialLost) -> Decision:
    note = f"attempt {event.attempt} lost on {event.agent}: {event.reason}"
    if trial.state != TrialState.RUNNING or event.run_id != (trial.run_id or ""):
        # Told again (a redelivered event), or not about the run we know: only note it.
        return Decision(update=TrialUpdate(trial.state, trial.attempt, trial.failures, trial.preemptions, error=note))
    # The broker already put the attempt back: it is queued until another
    # agent starts it. The lost run's time counts towards timeout.total and
    # the budgets, once: on this transition.
    return Decision(update=TrialUpdate(TrialState.QUEUED, trial.attempt, trial.failures, trial.preemptions, error=note,
                                       add_seconds=event.duration or 0.0))


def _halved(trial: TrialView, policy: RetryPolicy) -> dict[str, Any] | None:
    """The params for an OOM retry with the same effective batch, or None if the batch cannot halve."""
    batch = trial.params.get(policy.batch_param)
    accum = trial.params.get(policy.accum_param, 1)
    if not (isinstance(batch, int) and isinstance(accum, int)) or batch < 2 or batch % 2:
        return None
    return {**trial.params, policy.batch_param: batch // 2, policy.accum_param: accum * 2}


def _completed(trial: TrialView, run_end: RunEnd | None, base: dict[str, Any]) -> TrialUpdate:
    n, f, p = trial.attempt, trial.failures, trial.preemptions
    if run_end is None:
        return TrialUpdate(TrialState.COMPLETED, n, f, p, finished=True, **base)
    v = run_end.verdict
    rungs = {v.rung: run_end.value} if v.rung is not None else None
    if v.action == Action.PROMOTE and v.relaunch and v.budget is not None and run_end.budget_param is not None:
        # Successive halving promotes by resuming: the same trial, a new
        # attempt with the larger budget, from its checkpoint. Its params
        # record the budget it reached.
        params = {**trial.params, **(v.params or {}), run_end.budget_param: v.budget}
        return TrialUpdate(TrialState.PENDING, n + 1, f, p, params=params, rungs=rungs, **dict(base, losses=0))
    if v.action == Action.PRUNE:
        return TrialUpdate(TrialState.PRUNED, n, f, p, rungs=rungs, error=v.reason, finished=True, **base)
    if v.action == Action.PAUSE:  # waits at its rung; the top-up promotes it when it ranks (launch.py)
        return TrialUpdate(TrialState.PAUSED, n, f, p, rungs=rungs, **base)
    return TrialUpdate(TrialState.COMPLETED, n, f, p, rungs=rungs, finished=True, **base)


def _finished(sweep: SweepState, trial: TrialView, event: TrialFinished, run_end: RunEnd | None = None) -> TrialUpdate:
    # Every ended attempt carries its last values; the store merges them in
    # attempt order, so final metrics are the last value of each name over
    # all attempts (a resumed attempt need not re-report what came before).
    base: dict[str, Any] = dict(metrics=event.metrics or None, agent=event.agent or None, add_seconds=event.duration or 0.0,
                                flags=tuple(event.flags) or None, warnings=tuple(event.warnings) or None,
                                last_step=event.last_step)
    again = dict(base, losses=0)  # a new attempt: its loss count starts over
    done = dict(base, finished=True)
    n, f, p = trial.attempt, trial.failures, trial.preemptions
    if event.outcome == "completed":
        return _completed(trial, run_end, base)
    if event.outcome == "cancelled":
        return TrialUpdate(TrialState.CANCELLED, n, f, p, error=event.error, **done)
    if event.outcome == "preempted":
        # Not a failure: the trial goes back with a new attempt and resumes
        # from its last checkpoint. The retry budget is untouched.
        return TrialUpdate(TrialState.PENDING, n + 1, f, p + 1, error=event.error,
                           **dict(again, flags=preemption_flags(again["flags"], p + 1)))
    policy = sweep.retry
    if event.failure == "oom" and policy.on_oom == "halve_batch" and sweep.active:
        halved = _halved(trial, policy)
        if halved is not None:
            # Bounded by log2(batch), so it does not spend the failure budget.
            note = (f"CUDA out of memory with {policy.batch_param}={trial.params[policy.batch_param]}; retrying with "
                    f"{policy.batch_param}={halved[policy.batch_param]}, {policy.accum_param}={halved[policy.accum_param]}")
            return TrialUpdate(TrialState.PENDING, n + 1, f, p, error=note, params=halved, **again)
    failures = f + 1
    # A trial past timeout.total would be killed again at once; one that keeps
    # killing its agents was dead-lettered; one whose image cannot be pulled would
    # meet the same registry answer; one that failed as its last attempt did,
    # without a step between, would fail so again: none is retried.
    retryable = event.failure not in ("timeout", "lost", "image") and not repeated_failure(trial, event)
    if retryable and failures <= policy.max_failures and sweep.active:
        return TrialUpdate(TrialState.PENDING, n + 1, failures, p, error=event.error, **again)
    return TrialUpdate(TrialState.FAILED, n, failures, p, error=event.error, **done)


def repeated_failure(trial: TrialView, event: TrialFinished) -> bool:
    """Whether this failure repeats the last one: the same error (the stderr tail, as stored,
    with run-specific paths and ids blanked: :mod:`.same_error`), with no step reported past
    where the trial already was. Such a failure is deterministic (a script that refuses its
    checkpoint, a missing module, a bad flag), so a retry would fail the same way again. A
    crash that moved on, or whose message changed (another step, another node's error), is
    retried as before."""
    if trial.failures == 0 or not event.error or not trial.error or not same_error(trial.error, pg_text(event.error)):
        return False
    return event.last_step is None or event.last_step <= (trial.last_step or 0)
