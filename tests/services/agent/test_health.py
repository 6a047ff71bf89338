"""The broken-node breaker, fed plain final events, a stand-in for what the agent sees of its node and a
hand-moved clock. A trial's text is never evidence (issue 39): only the agent's errors and its observations."""

import pytest

from spotsweep.services.agent.health import Health, Observer, disk_evidence, gpu_evidence, node_evidence
from spotsweep.shared.messages import TrialFinished

ECC = "Traceback (most recent call last):\nRuntimeError: CUDA error: uncorrectable ECC error encountered"
BROKEN = "GPU 0 has 3 uncorrected ECC errors since the driver loaded (NVML)"


def ended(trial: int, outcome: str = "failed", failure: str | None = "exit", error: str | None = ECC,
          sweep: str | None = None) -> TrialFinished:
    sweep = sweep or f"s{trial % 2}"  # by default consecutive trials alternate between two sweeps
    return TrialFinished(sweep_id=sweep, trial_id=f"{sweep}.{trial}", attempt=1, outcome=outcome,  # type: ignore[arg-type]
                         failure=failure, error=error)  # type: ignore[arg-type]


class Node:
    """What the agent would observe of its node: broken (the evidence) or not (None)."""

    def __init__(self, broken: str | None = BROKEN) -> None:
        self.broken = broken

    def __call__(self) -> str | None:
        return self.broken


def broken(limit: int, **kw: object) -> Health:
    return Health(limit=limit, observe=Node(), **kw)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_trips_once_when_failures_of_enough_different_trials_of_two_sweeps_met_a_broken_node() -> None:
    h = broken(3)
    assert [h.record(ended(i)) for i in range(3)] == [False, False, True]
    assert h.tripped and not h.record(ended(9))  # says so once
    assert BROKEN in h.summary() and "2 sweeps" in h.summary()


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "RuntimeError: CUDA error: no CUDA-capable device is detected",
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "OSError: [Errno 28] No space left on device: '/var/lib/spotsweep/s.1-a1/checkpoint/x.pt'",
    "docker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: initialization error",
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock",
])
def test_text_a_trial_prints_is_never_evidence(line: str) -> None:
    """Any submitter can print these: on a node the agent sees healthy they blame no one, in any failure kind."""
    for failure in ("exit", "stalled", "refused", "oom", "timeout", "killed", "image"):
        assert node_evidence(ended(1, failure=failure, error=f"Traceback\n{line}\n"), Node(None)) is None
    h = Health(limit=2, observe=Node(None))
    assert not any(h.record(ended(i, sweep=f"s{i % 5}", error=line)) for i in range(40)) and not h.tripped


def test_plain_exits_of_many_sweeps_never_trip_a_healthy_node() -> None:
    h = Health(limit=2, observe=Node(None))
    for i in range(40):
        assert not h.record(ended(i, sweep=f"buggy{i % 10}", error="Traceback ...\nValueError: bad config"))
        assert not h.record(ended(i, sweep=f"plain{i % 10}", error=None))
    assert not h.tripped and h.streak == []


def test_refusals_ooms_timeouts_and_lost_attempts_say_nothing_even_on_a_broken_node() -> None:
    h = broken(2)
    for i, kind in enumerate(["refused", "oom", "timeout", "lost", "killed", "image"] * 3):
        assert not h.record(ended(i, failure=kind))
    assert not h.tripped


def test_the_agents_own_errors_are_evidence_and_bad_data_is_not_a_crash() -> None:
    assert node_evidence(ended(1, failure="agent", error="agent a1 error: OSError: [Errno 5] Input/output error")) \
        == "agent a1 error: OSError: [Errno 5] Input/output error"
    assert node_evidence(ended(1, failure="agent", error=None)) == "agent error"
    assert node_evidence(ended(1, error=None)) is None
    assert node_evidence(ended(1, error="\x00" * 10_000 + "\n" * 10_000), Node(None)) is None
    assert node_evidence(ended(1, outcome="cancelled", failure=None), Node()) is None
    assert node_evidence(ended(1, failure="stalled"), Node()) == BROKEN


def test_the_agent_observes_a_full_disk_and_a_broken_gpu_itself() -> None:
    gib = 2**30
    assert disk_evidence("/var/lib/spotsweep", 100 * 2**20, 500 * gib) == (
        "the agent's disk is full: /var/lib/spotsweep has 100 MiB free of 500 GiB")
    assert disk_evidence("/w", 511 * 2**20, 1 * gib) is not None and disk_evidence("/w", 600 * 2**20, 1 * gib) is None
    assert gpu_evidence([(0, None, 0), (1, "GPU is lost", 0)]) == "GPU 1 cannot be read by NVML: GPU is lost"
    assert gpu_evidence([(0, None, 0), (1, None, 2)]) == "GPU 1 has 2 uncorrected ECC errors since the driver loaded (NVML)"
    assert gpu_evidence([(0, None, 0)]) is None and gpu_evidence([]) is None
    assert Observer(("/nonexistent-folder", "/"))() is None  # this machine's disk has room; no GPU here is broken


def test_one_sweep_whose_code_breaks_the_driver_everywhere_does_not_condemn_the_node() -> None:
    h = broken(3)
    assert not any(h.record(ended(i, sweep="broken")) for i in range(20))
    assert not h.tripped
    assert h.record(ended(99, sweep="other"))  # a second sweep's failure blames the node too: now it is the node


def test_one_bad_trial_retried_here_does_not_condemn_the_node() -> None:
    h = broken(3)
    assert not any(h.record(ended(7)) for _ in range(10))
    assert not h.tripped


def test_failures_without_evidence_neither_count_nor_clear_the_streak() -> None:
    node = Node()
    h = Health(limit=3, observe=node)
    h.record(ended(1))
    node.broken = None  # the node looked fine after this one
    h.record(ended(2, error="SyntaxError: invalid syntax"))
    node.broken = BROKEN
    h.record(ended(3, failure="refused", error="cannot start 'nope': No such file or directory"))
    assert not h.record(ended(4))
    assert h.record(ended(5))  # 1, 4 and 5 blamed the node


def test_a_trip_lasts_the_cooldown_then_a_still_broken_node_trips_again_at_its_next_failure() -> None:
    clock = Clock()
    h = broken(2, cooldown=600, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 599
    assert h.tripped and h.remaining() == 1
    clock.now += 1
    assert not h.tripped  # cooldown over: the agent takes trials again
    node = h.observe
    assert isinstance(node, Node)
    node.broken = None
    assert not h.record(ended(4, error="exit code 1"))  # an exit on a node that looks fine does not trip it again
    node.broken = BROKEN
    assert h.record(ended(5))  # one more failure blaming the node is enough to stop again
    assert h.tripped and h.remaining() == 600


def test_a_success_after_the_cooldown_clears_the_streak() -> None:
    clock = Clock()
    h = broken(2, cooldown=60, clock=clock)
    assert [h.record(ended(i)) for i in range(2)] == [False, True]
    clock.now += 61
    h.record(ended(3, outcome="completed", failure=None))
    assert not h.record(ended(4)) and not h.tripped  # a fresh streak: one failure is not enough


def test_a_success_resets_and_preemptions_say_nothing() -> None:
    h = broken(2)
    h.record(ended(1))
    h.record(ended(2, outcome="completed", failure=None))
    h.record(ended(3, outcome="preempted", failure=None))
    assert not h.tripped and not h.record(ended(6, failure="stalled"))
    assert h.record(ended(7, failure="agent", error="agent a1 error: OSError: [Errno 28] No space left on device"))


def test_limit_zero_never_trips() -> None:
    h = broken(0)
    assert not any(h.record(ended(i)) for i in range(20))
