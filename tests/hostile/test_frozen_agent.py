"""A frozen agent's attempt never runs at once with its redelivered copy (issue 39, item 5).

``kill -STOP`` of an agent (a VM pause, a swap storm) used to leave its trial
running: RabbitMQ redelivered the attempt after the heartbeat timeout, and a
second agent ran it beside the first. Now the agent holds its attempts on a
lease (services/agent/hold.py) that its watchdog enforces while the agent is
frozen. The trial here appends ``run_id time`` lines to a shared file every
50 ms; the two runs' intervals must not overlap, and the trial completes
once, by the second run. The measured gap between the frozen run's last line
and the second run's first is docs/faults.md's figure. Under ``--runtime
docker`` (the docker client's SIGKILL leaves its container running) the
frozen agent's container must be gone before the copy's run starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
from cluster import Cluster
from hostile import bystander_spec

from tests.support.trial_image import need

HEARTBEAT = 4  # SPOTSWEEP_HEARTBEAT: the lease is half, the broker redelivers no sooner than 1.5x
RUN_S = 20  # the trial's length: the frozen run would still run long after the redelivery
TRIAL = """
import os, time
from spotsweep import trial
path, run = {path!r}, os.environ["SPOTSWEEP_RUN_ID"]
def note(what):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, ("%s %s %.4f\\n" % (run, what, time.time())).encode())  # no braces: the spec's placeholders
    os.close(fd)
note("start")
began, step = time.monotonic(), 0
while time.monotonic() - began < {run_s}:
    note("step")
    trial.report(step, score=step)
    step += 1
    time.sleep(0.05)
note("end")
"""


def _runs(path: Path) -> dict[str, list[tuple[str, float]]]:
    runs: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split()
        if len(parts) == 3:  # a line cut by the kill is not whole
            runs.setdefault(parts[0], []).append((parts[1], float(parts[2])))
    return runs


def _span(lines: list[tuple[str, float]]) -> float:
    return max(t for _, t in lines) - min(t for _, t in lines)


def _wait(condition, timeout: float, what: str, cluster: Cluster):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{cluster.logs()}"
        time.sleep(0.05)
    return value


def _agent(cluster: Cluster, name: str, tmp: Path, *flags: str) -> int:
    proc = cluster.start(name, "agent", "--slots", "1", "--class", "cpu", "--workdir", str(tmp / name), *flags,
                         env={"SPOTSWEEP_HEARTBEAT": str(HEARTBEAT)})
    _wait(lambda: "agent ready" in (tmp / f"{name}.log").read_text(), 90, f"{name} ready", cluster)
    return proc.pid


def _trial(database_url: str, sweep_id: str) -> tuple[str, str, int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT state, run_id, losses FROM trials WHERE sweep_id = %s", (sweep_id,)).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), int(row[2])


def test_a_frozen_agents_attempt_never_runs_beside_its_redelivered_copy(cluster: Cluster, database_url: str,
                                                                       tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    frozen = _agent(cluster, "agent-a", tmp_path)
    sweep_id = cluster.submit({
        "name": "frozen", "command": ["python", "-c", TRIAL.format(path=str(stamps), run_s=RUN_S)],
        "metric": {"name": "score", "mode": "max"}, "space": {"x": [0]}, "resources": {"gpus": 0, "class": "cpu"},
    })
    first = _wait(lambda: next(iter(_runs(stamps)), None), 90, "the trial started on agent-a", cluster)
    _agent(cluster, "agent-b", tmp_path)  # idle, waiting for the redelivery
    stopped = time.time()
    os.kill(frozen, signal.SIGSTOP)
    try:
        second = _wait(lambda: next((r for r in _runs(stamps) if r != first), None), 90,
                       "the attempt was redelivered to agent-b", cluster)
        # Frozen on while the copy runs (the freeze lasted 100 s): an unkilled run would overlap it.
        _wait(lambda: _span(_runs(stamps)[second]) >= 3, 60, "agent-b's run ran 3 s", cluster)
    finally:
        os.kill(frozen, signal.SIGCONT)
    _wait(lambda: _trial(database_url, sweep_id)[0] in ("completed", "failed"), 90, "the trial ended", cluster)

    runs = _runs(stamps)
    assert set(runs) == {first, second}, runs.keys()
    last = max(t for _, t in runs[first])
    gap = min(t for _, t in runs[second]) - last
    print(f"\nthe frozen agent's run wrote for {last - stopped:.2f} s after the SIGSTOP (lease {HEARTBEAT / 2:g} s); "
          f"its last line came {gap:.2f} s before the redelivered run's first")
    assert gap > 0, f"the runs overlapped by {-gap:.2f} s"
    assert [what for what, _ in runs[first]][-1] != "end", "the frozen run ran to its end"
    assert [what for what, _ in runs[second]][-1] == "end"
    assert _trial(database_url, sweep_id) == ("completed", second, 1)  # once, by the second run; one loss
    after = cluster.submit({**bystander_spec(), "name": "after"})  # both agents (agent-a back) take trials
    _wait(lambda: _trial_states(database_url, after) == {"completed"}, 60, "a clean sweep completed", cluster)


def _trial_states(database_url: str, sweep_id: str) -> set[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {str(s) for (s,) in conn.execute("SELECT state FROM trials WHERE sweep_id = %s", (sweep_id,))}


CONTAINER_TRIAL = """
import time
from spotsweep import trial
began, step = time.monotonic(), 0
while time.monotonic() - began < 20:
    trial.report(step, score=step)
    step += 1
    time.sleep(0.1)
"""


def _running(docker: str, run_id: str) -> bool:
    names = subprocess.run([docker, "ps", "--filter", f"name=spotsweep-{run_id}", "--format", "{{.Names}}"],
                           capture_output=True, text=True, timeout=60).stdout.split()
    return f"spotsweep-{run_id}" in names


def test_a_frozen_agents_container_trial_dies_before_its_copy_starts(cluster: Cluster, database_url: str,
                                                                    tmp_path: Path) -> None:
    """Killing the docker client does not stop its container: the watchdog kills the container's processes too."""
    docker = need("docker")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    frozen = _agent(cluster, "agent-a", tmp_path, "--runtime", "docker")
    sweep_id = cluster.submit({
        "name": "frozen-box", "command": ["python", "-c", CONTAINER_TRIAL], "image": "spotsweep-worker:cpu",
        "metric": {"name": "score", "mode": "max"}, "space": {"x": [0]}, "resources": {"gpus": 0, "class": "cpu"},
    })
    first = _wait(lambda: (t := _trial(database_url, sweep_id))[0] == "running" and t[1] != "None" and t[1], 120,
                  "the trial started on agent-a", cluster)
    _wait(lambda: _running(docker, first), 120, "agent-a's container runs", cluster)
    _agent(cluster, "agent-b", tmp_path, "--runtime", "docker")
    stopped = time.monotonic()
    os.kill(frozen, signal.SIGSTOP)
    try:
        _wait(lambda: not _running(docker, first), 60, "the frozen agent's container stopped", cluster)
        dead = time.monotonic()
        assert _trial(database_url, sweep_id)[1] == first, "the copy started before the frozen run's container died"
        second = _wait(lambda: (r := _trial(database_url, sweep_id)[1]) != first and r, 90,
                       "the attempt was redelivered to agent-b", cluster)
    finally:
        os.kill(frozen, signal.SIGCONT)
    print(f"\nthe frozen agent's container stopped {dead - stopped:.2f} s after the SIGSTOP (lease {HEARTBEAT / 2:g} s)")
    assert dead - stopped < HEARTBEAT, "the container outlived the lease by more than a half heartbeat"
    _wait(lambda: _trial(database_url, sweep_id)[0] in ("completed", "failed"), 120, "the trial ended", cluster)
    assert _trial(database_url, sweep_id) == ("completed", second, 1)
