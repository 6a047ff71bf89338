"""The broken-node breaker, fed plain final events and a hand-moved clock."""

import pytest

from spotsweep.services.agent.health import Health, node_evidence
from spotsweep.shared.messages import TrialFinished

ECC = "Traceback (most recent call last):\nRuntimeError: CUDA error: uncorrectable ECC error encountered"


def ended(trial: int, outcome: str = "failed", failure: str | None = "exit", error: str | None = ECC,
          sweep: str | None = None) -> TrialFinished:
    sweep = sweep or f"s{trial % 2}"  # by default consecutive trials alternate between two sweeps
    return TrialFinished(sweep_id=sweep, trial_id=f"{sweep}.{trial}", attempt=1, outcome=outcome,  # type: ignore[arg-type]
                         failure=failure, error=error)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_trips_once_when_failures_of_enough_different_trials_of_two_sweeps_blamed_the_node() -> None:
    h = Health(limit=3)
    assert [h.record(ended(i)) for i in range(3)] == [False, False, True]
    assert h.tripped and not h.record(ended(9))  # says so once
    assert "uncorrectable ECC error" in h.summary() and "2 sweeps" in h.summary()


def test_plain_exits_of_many_sweeps_never_trip_it() -> None:
    """Two (or ten) sweeps whose trials exit 1 are those sweeps' fault: the node goes on taking trials."""
    h = Health(limit=2)
    for i in range(40):
        assert not h.record(ended(i, sweep=f"buggy{i % 10}", error="Traceback ...\nValueError: bad config"))
        assert not h.record(ended(i, sweep=f"plain{i % 10}", error=None))
    assert not h.tripped and h.streak == []


def test_refusals_of_bad_input_never_trip_it_whatever_their_text_says() -> None:
    h = Health(limit=2)
    refused = "the sweep's code archive code/x.tar.gz is refused: 'CUDA error: ECC/../../x' is outside the folder"
    assert not any(h.record(ended(i, failure="refused", error=refused)) for i in range(20))
    assert not h.tripped


def test_ooms_timeouts_and_lost_attempts_say_nothing_about_the_node() -> None:
    h = Health(limit=2)
    for i, kind in enumerate(["oom", "timeout", "lost", "oom", "timeout", "lost"]):
        assert not h.record(ended(i, failure=kind))
    assert not h.tripped


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: no CUDA-capable device is detected",
    "Failed to initialize NVML: Driver/library version mismatch",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error",
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "OSError: [Errno 28] No space left on device: '/var/lib/spotsweep/s.1-a1/checkpoint/x.pt'",
    "docker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: initialization error",
])
def test_known_node_causes_in_the_error_text_are_evidence(line: str) -> None:
    final = ended(1, error=f"Traceback (most recent call last):\n  File \"train.py\"\n{line}\n")
    assert node_evidence(final, own_paths=("/var/lib/spotsweep",)) == line


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: device-side assert triggered",
    "RuntimeError: CUDA error: out of memory",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "OSError: [Errno 28] No space left on device: '/mnt/the-trials-own-volume/x'",  # not the agent's folder
    "ValueError: loss is NaN",
])
def test_errors_of_the_trials_own_making_are_not(line: str) -> None:
    assert node_evidence(ended(1, error=line), own_paths=("/var/lib/spotsweep",)) is None


def test_the_agents_own_errors_are_evidence_and_bad_data_is_not_a_crash() -> None:
    assert node_evidence(ended(1, failure="agent", error="agent a1 error: OSError: [Errno 5] Input/output error")) \
        == "agent a1 error: OSError: [Errno 5] Input/output error"
    assert node_evidence(ended(1, failure="agent", error=None)) == "agent error"
    assert node_evidence(ended(1, error=None)) is None
    assert node_evidence(ended(1, error="\x00" * 10_000 + "\n" * 10_000)) is None
    assert node_evidence(ended(1, outcome="cancelled", failure=None)) is None


def test_one_sweep_whose_code_breaks_the_driver_everywhere_does_not_condemn_the_node() -> None:
    h = Health(limit=3)
    assert not any(h.record(ended(i, sweep="broken")) for i in range(20))
    assert not h.tripped
    assert h.record(ended(99, sweep="other"))  # a second sweep's failure blames the node too: now it is the node


def test_one_bad_trial_retried_here_does_not_condemn_the_node() -> None:
    h = Health(limit=3)
    assert not any(h.record(ended(7)) for _ in range(10))
    assert not h.tripped


def test_failures_without_evidence_neither_count_nor_clear_the_streak() -> None:
    h = Health(limit=3)
    h.record(ended(1))
    h.record(ended(2, error="SyntaxError: invalid syntax"))
    h.record(ended(3, failure="refused", error="cannot start 'nope': No such file or directory"))
    assert not h.record(ended(4))
    assert h.record(ended(5))  # 1, 4 and 5 blamed the node


def test_a_trip_lasts_the_cooldown_then_a_still_broken_node_trips_again_at_its_next_failure() -> None:
    clock = Clock()
    h = Health(limit=2, cooldown=600, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 599
    assert h.tripped and h.remaining() == 1
    clock.now += 1
    assert not h.tripped  # cooldown over: the agent takes trials again
    assert not h.record(ended(4, error="exit code 1"))  # a plain exit does not trip it again
    assert h.record(ended(5))  # one more failure blaming the node is enough to stop again
    assert h.tripped and h.remaining() == 600


def test_a_success_after_the_cooldown_clears_the_streak() -> None:
    clock = Clock()
    h = Health(limit=2, cooldown=60, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 61
    h.record(ended(3, outcome="completed", failure=None))
    assert not h.record(ended(4)) and not h.tripped  # a fresh streak: one failure is not enough


def test_a_success_resets_and_preemptions_say_nothing() -> None:
    h = Health(limit=2)
    h.record(ended(1))
    h.record(ended(2, outcome="completed", failure=None))
    h.record(ended(3, outcome="preempted", failure=None))
    assert not h.tripped and not h.record(ended(6, failure="stalled"))
    assert h.record(ended(7, failure="agent", error="agent a1 error: OSError: [Errno 28] No space left on device"))


def test_limit_zero_never_trips() -> None:
    h = Health(limit=0)
    assert not any(h.record(ended(i)) for i in range(20))
