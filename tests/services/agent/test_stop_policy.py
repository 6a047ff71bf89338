"""The stop policy with plain values: no process, no thread, no clock."""

from __future__ import annotations

from spotsweep.services.agent.stop_policy import Limits, Signals, StopState, decide

RUNNING = StopState(started=0.0, last_line=0.0)
NO_LIMITS = Limits()


def test_nothing_happens_to_a_quiet_run_without_limits() -> None:
    assert decide(RUNNING, Signals(), 1e6, NO_LIMITS) == (RUNNING, "none")


def test_a_hard_stop_kills_and_keeps_the_reason() -> None:
    state, action = decide(RUNNING, Signals(kill=True, lost=True, stop="dup"), 1.0, NO_LIMITS)
    assert (state.reason, action) == ("exited", "kill")


def test_a_lost_delivery_kills_once_and_wins_over_everything_but_a_hard_stop() -> None:
    state, action = decide(RUNNING, Signals(lost=True, stop="dup", cancelled=True, preempt=True), 1.0, NO_LIMITS)
    assert (state.reason, action) == ("lost", "kill")
    assert decide(state, Signals(lost=True), 2.0, NO_LIMITS) == (state, "none")
    stopped, _ = decide(RUNNING, Signals(stop="dup"), 1.0, NO_LIMITS)
    assert decide(stopped, Signals(lost=True), 2.0, NO_LIMITS)[0].reason == "lost"  # lost even once stopped


def test_the_planners_stop_comes_before_a_cancel_and_keeps_its_reason() -> None:
    state, action = decide(RUNNING, Signals(stop="duplicate run", cancelled=True), 1.0, NO_LIMITS)
    assert (state.reason, state.stop_reason, action) == ("stopped", "duplicate run", "kill")
    assert decide(state, Signals(cancelled=True, preempt=True), 2.0, NO_LIMITS) == (state, "none")


def test_a_cancelled_sweep_kills() -> None:
    state, action = decide(RUNNING, Signals(cancelled=True), 1.0, NO_LIMITS)
    assert (state.reason, action) == ("cancelled", "kill")


def test_stall_counts_from_the_last_line_and_budget_from_the_start() -> None:
    limits = Limits(stall=10.0, budget=100.0)
    assert decide(StopState(started=0.0, last_line=5.0), Signals(), 15.0, limits)[1] == "none"
    state, action = decide(StopState(started=0.0, last_line=5.0), Signals(), 15.5, limits)
    assert (state.reason, action) == ("stalled", "kill")
    assert decide(StopState(started=0.0, last_line=99.0), Signals(), 100.0, limits)[1] == "none"
    state, action = decide(StopState(started=0.0, last_line=99.0), Signals(), 100.5, limits)
    assert (state.reason, action) == ("timeout", "kill")


def test_preemption_terms_once_then_kills_after_the_grace() -> None:
    limits = Limits(grace=30.0, stall=1.0)
    state, action = decide(RUNNING, Signals(preempt=True), 0.5, limits)
    assert (state.reason, state.term_sent_at, action) == ("preempted", 0.5, "term")
    assert decide(state, Signals(preempt=True), 30.5, limits) == (state, "none")  # a silent draining trial: no stall
    assert decide(state, Signals(preempt=True), 30.6, limits) == (state, "kill")
    cancelled, action = decide(state, Signals(preempt=True, cancelled=True), 1.0, limits)
    assert (cancelled.reason, action) == ("cancelled", "kill")  # a cancel still ends a preempted run
