"""The trial state machine: terminal states are immutable, retries go back to pending."""

import pytest

from spotsweep.shared.errors import TransitionError
from spotsweep.shared.states import TERMINAL, TrialState, can_transition, check_transition


@pytest.mark.parametrize("terminal", sorted(TERMINAL, key=lambda s: s.value))
@pytest.mark.parametrize("target", list(TrialState))
def test_terminal_states_never_change(terminal: TrialState, target: TrialState) -> None:
    if target == terminal:
        assert can_transition(terminal, target)  # idempotent re-application
    else:
        with pytest.raises(TransitionError, match=f"{terminal.value} -> {target.value}"):
            check_transition(terminal, target)


def test_life_of_a_retried_trial() -> None:
    path = [TrialState.PENDING, TrialState.QUEUED, TrialState.RUNNING, TrialState.PENDING, TrialState.QUEUED,
            TrialState.RUNNING, TrialState.COMPLETED]
    for src, dst in zip(path, path[1:]):
        assert check_transition(src, dst) == dst


def test_failure_seen_before_the_start_event_may_go_back_to_pending() -> None:
    # Events from one attempt can arrive out of order at the planner.
    assert can_transition(TrialState.QUEUED, TrialState.PENDING)
