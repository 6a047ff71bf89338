"""The broken-node breaker, fed plain final events."""

from spotsweep.services.agent.health import Health
from spotsweep.shared.messages import TrialFinished


def ended(trial: int, outcome: str = "failed", failure: str | None = "exit", error: str = "CUDA error: ECC") -> TrialFinished:
    return TrialFinished(sweep_id="s", trial_id=f"s.{trial}", attempt=1, outcome=outcome, failure=failure,  # type: ignore[arg-type]
                         error=error)


def test_trips_once_when_recent_attempts_of_enough_different_trials_all_failed() -> None:
    h = Health(limit=3)
    assert [h.record(ended(i)) for i in range(3)] == [False, False, True]
    assert h.tripped and not h.record(ended(9))  # says so once
    assert "CUDA error: ECC" in h.summary()


def test_one_bad_trial_retried_here_does_not_condemn_the_node() -> None:
    h = Health(limit=3)
    assert not any(h.record(ended(7)) for _ in range(10))
    assert not h.tripped


def test_a_success_resets_and_preemptions_or_lost_agents_say_nothing() -> None:
    h = Health(limit=2)
    h.record(ended(1))
    h.record(ended(2, outcome="completed", failure=None))
    h.record(ended(3, outcome="preempted", failure=None))
    h.record(ended(4, failure="lost"))
    h.record(ended(5, failure="timeout"))
    assert not h.tripped and not h.record(ended(6, failure="oom"))
    assert h.record(ended(7, failure="stalled"))  # 6 and 7: two different trials in a row


def test_limit_zero_never_trips() -> None:
    h = Health(limit=0)
    assert not any(h.record(ended(i)) for i in range(20))
