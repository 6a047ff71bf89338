"""Resource requests: the spec's quantities, the agent's fit decision and its ledger, and the memory
cgroup a trial runs in (on a node that has one: this one, as root, has cgroup v1's memory controller)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from spotsweep.services.agent import cgroup
from spotsweep.services.agent.capacity import Capacity, Fit, Ledger, Request, fit
from spotsweep.shared.errors import SpecError
from spotsweep.shared.quantity import cpu_cores, human_bytes, memory_bytes
from spotsweep.shared.spec import load_spec

Mi, Gi = 2**20, 2**30
SPEC = "name: s\ncommand: python t.py\nmetric: {name: loss}\n"


def test_kubernetes_quantities_are_bytes_and_cores() -> None:
    assert [memory_bytes(v) for v in ("256Mi", "32Gi", "1G", "1.5Gi", 1024, "512k")] == [
        256 * Mi, 32 * Gi, 10**9, 3 * Gi // 2, 1024, 512_000]
    assert [cpu_cores(v) for v in (8, "8", 0.5, "500m")] == [8.0, 8.0, 0.5, 0.5]
    assert human_bytes(256 * Mi) == "256 MiB" and human_bytes(64 * Gi) == "64 GiB"


def test_the_spec_takes_cpus_and_memory_and_names_the_field_of_a_bad_one() -> None:
    spec = load_spec(SPEC + "resources: {class: gpu, gpus: 1, cpus: 8, memory: 32Gi}")
    assert (spec.resources.cpus, spec.resources.memory) == (8.0, 32 * Gi)
    assert load_spec(SPEC).resources.memory is None  # optional: no request, no reservation
    for bad, field, said in (("memory: 32GB", "resources.memory", "'32GB'"), ("memory: 0", "resources.memory", "0"),
                             ("cpus: -2", "resources.cpus", "-2"), ("memory: [1]", "resources.memory", "[1]")):
        with pytest.raises(SpecError) as e:
            load_spec(SPEC + "resources: {" + bad + "}")
        assert field in str(e.value) and said in str(e.value)


@pytest.mark.parametrize(("bad", "field", "said"), [
    ("cpus: 1m", "resources.cpus", "'1m'"), ("cpus: 0.005", "resources.cpus", "0.005"),
    ("memory: '1'", "resources.memory", "'1'"), ("memory: 4Mi", "resources.memory", "'4Mi'")])
def test_values_a_container_runtime_refuses_are_refused_by_the_spec(bad: str, field: str, said: str) -> None:
    """docker and podman refuse --cpus under 0.01 and --memory under 6 MiB: not a node's failure (issue 39)."""
    with pytest.raises(SpecError) as e:
        load_spec(SPEC + "resources: {" + bad + "}")
    assert field in str(e.value) and said in str(e.value) and "the least docker and podman run with" in str(e.value)
    assert load_spec(SPEC + "resources: {cpus: 10m, memory: 6Mi}").resources.memory == 6 * Mi


CAP = Capacity(cpus=4, memory=1 * Gi, resource_class="gpu")


@pytest.mark.parametrize(("request_", "held", "verdict"), [
    (Request(memory=400 * Mi), [], "take"),
    (Request(memory=400 * Mi), [Request(memory=400 * Mi)], "take"),
    (Request(memory=400 * Mi), [Request(memory=400 * Mi)] * 2, "wait"),  # 1200 MiB > 1 GiB: never overcommitted
    (Request(cpus=3), [Request(cpus=2), Request(memory=900 * Mi)], "wait"),
    (Request(cpus=2, memory=100 * Mi), [Request(cpus=2), Request(memory=900 * Mi)], "take"),
    (Request(), [Request(cpus=4, memory=1 * Gi)], "take"),  # no request reserves nothing
    (Request(memory=2 * Gi), [], "never"),
    (Request(cpus=8), [], "never"),
])
def test_a_request_fits_beside_the_running_trials_or_waits_or_never_fits(
        request_: Request, held: list[Request], verdict: str) -> None:
    assert fit(request_, CAP, held).verdict == verdict


def test_a_request_no_agent_could_hold_says_what_it_asks_and_what_the_agent_offers() -> None:
    assert fit(Request(memory=64 * Gi), CAP, []) == Fit(
        "never", "resources.memory asks for 64 GiB, but this agent of class gpu offers 1 GiB (--memory) in all")


def test_the_ledger_holds_a_trial_until_a_running_one_ends_and_gives_up_when_told() -> None:
    ledger = Ledger(CAP)
    big = Request(memory=700 * Mi)
    started, done, stop = threading.Event(), threading.Event(), threading.Event()
    verdicts: list[str] = []

    def second() -> None:
        with ledger.hold(big, stop.is_set, poll=0.05) as room:
            verdicts.append(room.verdict)
            started.set()
            done.wait(10)

    with ledger.hold(big, stop.is_set) as first:
        assert first.verdict == "take"
        t = threading.Thread(target=second)
        t.start()
        assert not started.wait(0.3)  # 1400 MiB would not fit: it waits
        assert ledger.held == [big]
    assert started.wait(10) and verdicts == ["take"]  # room once the first ended
    done.set()
    t.join(10)
    assert ledger.held == []
    with ledger.hold(big, stop.is_set), ledger.hold(big, lambda: True) as gave_up:
        assert gave_up.verdict == "wait" and ledger.held == [big]  # a draining agent hands it back instead
    with ledger.hold(Request(memory=2 * Gi), lambda: False) as never:
        assert never.verdict == "never" and ledger.held == []


def test_the_agents_own_v1_memory_cgroup_is_found_from_proc_and_its_limit_read(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/\n4:memory:/pods/agent\n0::/\n")
    assert cgroup.find(tmp_path, proc) is None  # no such cgroup to make children in: the monitor enforces
    own = tmp_path / "memory" / "pods" / "agent"
    own.mkdir(parents=True)
    (own / "memory.limit_in_bytes").write_text(str(8 * Gi))
    assert cgroup.Hierarchy(own, 1).own_limit() == 8 * Gi  # an agent in a pod offers the pod's memory
    (own / "memory.limit_in_bytes").write_text("9223372036854771712")
    assert cgroup.Hierarchy(own, 1).own_limit() is None


def _real() -> cgroup.Hierarchy:
    found = cgroup.find()
    if found is None:
        pytest.skip("no memory cgroup the agent may make children in on this node")
    return found


def test_a_process_over_its_cgroups_limit_is_killed_and_the_kill_is_seen() -> None:
    group = _real().make("test-hog", 64 * Mi)
    assert group is not None
    try:
        hog = "x = []\nfor _ in range(40): x.append(bytearray(8 << 20))\nprint('survived')"
        proc = subprocess.run([sys.executable, "-c", hog], preexec_fn=group.joiner(), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == -9 and "survived" not in proc.stdout
        assert group.oom_killed()
    finally:
        group.remove()
    assert not group.path.exists()


def test_a_process_within_its_limit_runs_untouched() -> None:
    group = _real().make("test-calm", 256 * Mi)
    assert group is not None
    try:
        calm = "x = bytearray(32 << 20)\nprint('done')"
        proc = subprocess.run([sys.executable, "-c", calm], preexec_fn=group.joiner(), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "done"
        assert not group.oom_killed()
    finally:
        group.remove()


class _Rss:
    """A sampler whose trial holds ``mib`` resident."""

    def __init__(self, mib: float) -> None:
        self.mib = mib

    def sample(self) -> dict[str, float]:
        return {"sys/rss_mb": self.mib}


@pytest.mark.parametrize(("rss_mib", "killed"), [(300.0, True), (200.0, False)])
def test_without_a_cgroup_the_monitor_kills_a_trial_over_its_memory(rss_mib: float, killed: bool) -> None:
    from spotsweep.services.agent.monitor import RunMonitor
    from spotsweep.shared.messages import TrialMessage

    msg = TrialMessage(sweep_id="s", trial_id="s.0", attempt=1, trial_name="t", index=0, params={}, argv=["x"],
                       metric="loss", memory=256 * Mi)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        monitor = RunMonitor(msg, "r1", proc.pid, lambda e: None, lambda step, values: None, every=1,
                             clock=iter([0.0, 2.0]).__next__, sampler=_Rss(rss_mib), memory_limit=256 * Mi)  # type: ignore[arg-type]
        monitor.poll(0.0)
        assert monitor.over_memory is killed
        assert (proc.wait(5) == -9) if killed else proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_request_travels_from_the_spec_to_the_agent_in_the_trial_message() -> None:
    from spotsweep.services.planner.outbox import trial_message

    spec = load_spec(SPEC + "resources: {class: cpu, gpus: 0, cpus: 500m, memory: 256Mi}")
    row = {"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}
    msg = trial_message(row, spec)
    assert (msg.cpus, msg.memory, msg.resource_class) == (0.5, 256 * Mi, "cpu")
    assert trial_message(row, load_spec(SPEC)).memory is None
