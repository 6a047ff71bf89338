"""The broken-node breaker, fed plain final events and a hand-moved clock."""

from spotsweep.services.agent.health import Health
from spotsweep.shared.messages import TrialFinished


def ended(trial: int, outcome: str = "failed", failure: str | None = "exit", error: str = "CUDA error: ECC",
          sweep: str | None = None) -> TrialFinished:
    sweep = sweep or f"s{trial % 2}"  # by default consecutive trials alternate between two sweeps
    return TrialFinished(sweep_id=sweep, trial_id=f"{sweep}.{trial}", attempt=1, outcome=outcome,  # type: ignore[arg-type]
                         failure=failure, error=error)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_trips_once_when_recent_attempts_of_enough_different_trials_of_two_sweeps_all_failed() -> None:
    h = Health(limit=3)
    assert [h.record(ended(i)) for i in range(3)] == [False, False, True]
    assert h.tripped and not h.record(ended(9))  # says so once
    assert "CUDA error: ECC" in h.summary() and "2 sweeps" in h.summary()


def test_one_sweep_whose_script_fails_everywhere_does_not_condemn_the_node() -> None:
    h = Health(limit=3)
    assert not any(h.record(ended(i, sweep="broken", error="SyntaxError: invalid syntax")) for i in range(20))
    assert not h.tripped
    assert h.record(ended(99, sweep="other"))  # a second sweep failing here too: now it is the node


def test_one_bad_trial_retried_here_does_not_condemn_the_node() -> None:
    h = Health(limit=3)
    assert not any(h.record(ended(7)) for _ in range(10))
    assert not h.tripped


def test_a_trip_lasts_the_cooldown_then_a_still_broken_node_trips_again_at_its_next_failure() -> None:
    clock = Clock()
    h = Health(limit=2, cooldown=600, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 599
    assert h.tripped and h.remaining() == 1
    clock.now += 1
    assert not h.tripped  # cooldown over: the agent takes trials again
    assert h.record(ended(5))  # and one more failure is enough to stop again
    assert h.tripped and h.remaining() == 600


def test_a_success_after_the_cooldown_clears_the_streak() -> None:
    clock = Clock()
    h = Health(limit=2, cooldown=60, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 61
    h.record(ended(3, outcome="completed", failure=None))
    assert not h.record(ended(4)) and not h.tripped  # a fresh streak: one failure is not enough


def test_a_success_resets_and_preemptions_or_lost_agents_say_nothing() -> None:
    h = Health(limit=2)
    h.record(ended(1))
    h.record(ended(2, outcome="completed", failure=None))
    h.record(ended(3, outcome="preempted", failure=None))
    h.record(ended(4, failure="lost"))
    h.record(ended(5, failure="timeout"))
    assert not h.tripped and not h.record(ended(6, failure="oom"))
    assert h.record(ended(7, failure="stalled"))  # 6 and 7: two different trials of two sweeps in a row


def test_limit_zero_never_trips() -> None:
    h = Health(limit=0)
    assert not any(h.record(ended(i)) for i in range(20))
