"""The trial state machine: one enum and one function that validates moves.

Terminal states are immutable: once a trial is completed, pruned, failed or
cancelled, every later event about it is a no-op (that is what makes
redelivered and late events harmless).
"""

from __future__ import annotations

from enum import Enum

from spotsweep.shared.errors import TransitionError


class TrialState(str, Enum):
    PENDING = "pending"  # row written, message not yet confirmed by the broker
    QUEUED = "queued"  # trial message confirmed on the broker
    RUNNING = "running"  # an agent reported the process started
    PAUSED = "paused"  # ended a run at a successive-halving rung; waits for a promotion (no slot held)
    COMPLETED = "completed"
    PRUNED = "pruned"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED, TrialState.CANCELLED})
IN_FLIGHT = frozenset({TrialState.PENDING, TrialState.QUEUED, TrialState.RUNNING})

_ALLOWED: dict[TrialState, frozenset[TrialState]] = {
    TrialState.PENDING: frozenset({TrialState.QUEUED, TrialState.RUNNING, *TERMINAL}),
    # -> PENDING is a retry or a preemption putting the trial back with a new
    # attempt; PENDING is the outbox state until the broker confirms it.
    TrialState.QUEUED: frozenset({TrialState.PENDING, TrialState.RUNNING, *TERMINAL}),
    TrialState.RUNNING: frozenset({TrialState.PENDING, TrialState.QUEUED, TrialState.PAUSED, *TERMINAL}),
    # A promotion relaunches a paused trial (a new attempt); one never promoted is pruned.
    TrialState.PAUSED: frozenset({TrialState.PENDING, *TERMINAL}),
}


def can_transition(src: TrialState, dst: TrialState) -> bool:
    """True when ``src -> dst`` is allowed. ``src == dst`` is an idempotent no-op."""
    if src == dst:
        return True
    return dst in _ALLOWED.get(src, frozenset())


def check_transition(src: TrialState, dst: TrialState) -> TrialState:
    """Return ``dst`` if the move is allowed, else raise :class:`TransitionError`."""
    if not can_transition(src, dst):
        raise TransitionError(f"trial state {src.value} -> {dst.value} is not allowed")
    return dst
