"""Trials in containers (``--runtime docker|podman``, issue 30) through the real services: planner, collector and
agents as processes over RabbitMQ, PostgreSQL and moto's S3, and a trial image built with no registry
(tests/support/trial_image.py). The trial script uses Python's standard library only: the image has no spotsweep."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spotsweep.services.agent.container import INSTANCE, LABEL, Runtime
from spotsweep.shared.artifacts import S3ArtifactStore
from tests.integration.test_inputs_s3 import USER, _ensure_user
from tests.integration.test_workdir import ended, submitted, write_spec
from tests.support.cluster import Cluster, wait_for
from tests.support.trial_image import IMAGE, MARKER, MARKER_TEXT, need, trial_image
from waiting import wait_until  # tests/support

pytestmark = pytest.mark.integration

# Counts to STEPS, a checkpoint each step (written to a temp file, renamed); on SIGTERM it stops after the
# step's checkpoint. ``hog`` allocates until something stops it. ``marker`` is 1 only inside the image.
TRAIN = f"""
import json, os, pathlib, signal, sys, time
role, steps = sys.argv[1], int(sys.argv[2])
marker = float(pathlib.Path({MARKER!r}).read_text() == {MARKER_TEXT!r})
out = open(os.environ["SPOTSWEEP_METRICS"], "a", buffering=1)
ckpt = pathlib.Path(os.environ["SPOTSWEEP_CHECKPOINT_DIR"]) / "state.json"
state = json.loads(ckpt.read_text()) if ckpt.exists() else {{"step": 0, "acc": 0}}
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
held = []
while role == "hog":
    held.append(b"x" * (16 << 20))
    time.sleep(0.01)
while state["step"] < steps and not stop:
    time.sleep(0.2)
    state["step"] += 1
    state["acc"] += state["step"]
    out.write(json.dumps({{"step": state["step"], "acc": state["acc"]}}) + "\\n")
    ckpt.with_suffix(".tmp").write_text(json.dumps(state))
    os.replace(ckpt.with_suffix(".tmp"), ckpt)
    out.write(json.dumps({{"checkpoint": state["step"]}}) + "\\n")
if not stop:
    resumed = float(os.environ.get("SPOTSWEEP_RESUME_STEP") is not None)
    out.write(json.dumps({{"step": steps, "loss": state["acc"], "marker": marker, "resumed": resumed}}) + "\\n")
"""


def code(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    return folder


def agent(cluster: Cluster, name: str, runtime: str, tmp_path: Path, *more: str) -> None:
    cluster.start(name, "agent", "--class", "cpu", "--runtime", runtime, "--default-image", IMAGE,
                  "--workdir", str(tmp_path / name), *more)


def one(db: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(db) as conn:
        return conn.execute(sql, args).fetchone()


def left_containers(runtime: str, workdir: Path, *more: str) -> list[str]:
    """The containers of the agents on ``workdir`` (``--all``: stopped ones too; ``more``: other filters)."""
    return subprocess.run([need(runtime), "ps", "--all", "--quiet", "--filter", f"label={LABEL}={workdir}", *more],
                          capture_output=True, text=True, check=True).stdout.split()


def test_a_trial_runs_in_its_image_and_resumes_in_a_new_container_on_another_agent(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    trial_image("docker")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent(cluster, "first", "docker", tmp_path)
    code(tmp_path)
    spec = write_spec(tmp_path / "specs" / "boxed.yaml", workdir="../code", image=IMAGE,
                      command=["python3", "train.py", "calm", "40"], retries={"max_failures": 0})
    sweep_id, _ = submitted(cluster, spec)
    at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'acc'"
    assert (wait_for(database_url, at_step, (sweep_id,), lambda s: (s or 0) >= 5) or 0) >= 5, cluster.logs()
    cluster.term("first")  # the spot node's notice: the trial checkpoints, stops, and goes back
    agent(cluster, "second", "docker", tmp_path)
    [row] = ended(database_url, sweep_id, 1)
    assert row["state"] == "completed", (row, cluster.logs())
    assert row["metrics"]["loss"] == sum(range(41))  # exact: every step once, across the two containers
    assert (row["metrics"]["marker"], row["metrics"]["resumed"]) == (1.0, 1.0)
    assert one(database_url, "SELECT preemptions FROM trial_results WHERE sweep_id = %s", sweep_id) == (1,)
    with psycopg.connect(database_url) as conn:
        runs = conn.execute("SELECT body->>'agent', body->>'image' FROM trial_events WHERE sweep_id = %s AND "
                            "kind = 'trial.started' ORDER BY recorded_at", (sweep_id,)).fetchall()
    assert len(runs) == 2 and runs[0][0] != runs[1][0], runs  # two agents
    assert all(image.startswith(f"{IMAGE} sha256:") for _, image in runs), runs  # the image's id on each attempt
    sampled = "SELECT count(*) FROM metric_points WHERE sweep_id = %s AND name = 'sys/rss_mb'"
    assert one(database_url, sampled, sweep_id)[0] >= 1  # resource samples, from the container's processes
    cluster.stop()
    assert not left_containers("docker", tmp_path / "first") and not left_containers("docker", tmp_path / "second")


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_container_past_its_memory_fails_with_the_reason_and_its_neighbour_completes(
        runtime: str, cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    trial_image(runtime)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent(cluster, "agent", runtime, tmp_path, "--slots", "2", "--memory", "1Gi")
    code(tmp_path)
    spec = write_spec(tmp_path / "specs" / "leak.yaml", workdir="../code", command=["python3", "train.py", "{role}", "10"],
                      space={"role": ["calm", "hog"]}, trial_name="{role}", retries={"max_failures": 0},
                      resources={"gpus": 0, "class": "cpu", "memory": "256Mi"})
    sweep_id, _ = submitted(cluster, spec)
    calm, hog = ended(database_url, sweep_id, 2)
    assert (calm["state"], (calm["metrics"] or {}).get("marker")) == ("completed", 1.0), (calm, cluster.logs())
    if runtime == "podman" and _cgroups_v1("podman"):
        # Podman on cgroup v1 does not say OOMKilled: without that evidence a SIGKILL is a crash, never an oom.
        assert hog["state"] == "failed" and "killed by signal 9, not by the agent" in hog["error"], (hog, cluster.logs())
    else:
        assert hog["state"] == "failed" and "exceeded its memory request (256 MiB" in hog["error"], (hog, cluster.logs())


def _cgroups_v1(runtime: str) -> bool:
    answer = subprocess.run([need(runtime), "info", "--format", "{{.Host.CgroupsVersion}}"], capture_output=True, text=True)
    return answer.stdout.strip() == "v1"


def test_an_image_that_cannot_be_pulled_fails_the_trial_once_with_the_reason(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    trial_image("docker")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent(cluster, "agent", "docker", tmp_path)
    code(tmp_path)
    spec = write_spec(tmp_path / "specs" / "nope.yaml", workdir="../code", image="spotsweep-no-such-image:nope",
                      command=["python3", "train.py", "calm", "1"], retries={"max_failures": 3})
    sweep_id, _ = submitted(cluster, spec)
    [row] = ended(database_url, sweep_id, 1)
    assert row["state"] == "failed" and "'spotsweep-no-such-image:nope' is not on this node and cannot be pulled" \
        in row["error"], row
    assert one(database_url, "SELECT attempts, failures FROM trial_results WHERE sweep_id = %s", sweep_id) == (1, 1)


def test_a_killed_agent_leaves_no_container_running_and_the_next_one_removes_what_it_left(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    trial_image("docker")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent(cluster, "first", "docker", tmp_path)
    code(tmp_path)
    spec = write_spec(tmp_path / "specs" / "orphan.yaml", workdir="../code", command=["python3", "train.py", "calm", "300"])
    sweep_id, _ = submitted(cluster, spec)
    at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'acc'"
    assert (wait_for(database_url, at_step, (sweep_id,), lambda s: (s or 0) >= 2) or 0) >= 2, cluster.logs()
    os.kill(cluster.procs["first"].pid, signal.SIGKILL)  # the agent alone (the OOM killer's pick): its watchdog lives
    workdir = tmp_path / "first"
    assert wait_until(lambda: not left_containers("docker", workdir, "--filter", "status=running"), 30)
    [left] = left_containers("docker", workdir)  # stopped, not yet removed
    agent(cluster, "second", "docker", tmp_path, "--workdir", str(workdir))  # where the first one ran
    assert wait_until(lambda: left not in left_containers("docker", workdir), 60), cluster.logs()
    cluster.stop()  # the trial the second agent took again is stopped, its container removed
    assert not left_containers("docker", workdir)


READER = """
import json, os, pathlib
data = pathlib.Path("data/tokens.bin")
try:
    (data.parent / "new").write_bytes(b"x")
    wrote = 1.0
except OSError:
    wrote = 0.0
with open(os.environ["SPOTSWEEP_METRICS"], "a") as out:
    out.write(json.dumps({"step": 1, "size": data.stat().st_size, "uid": os.getuid(), "wrote": wrote}) + "\\n")
"""


def test_a_container_runs_as_the_trial_user_and_reads_its_staged_input_read_only(
        cluster: Cluster, s3_env: dict[str, str], tmp_path: Path) -> None:
    trial_image("docker")
    _ensure_user()
    work = Path(tempfile.mkdtemp(prefix="spotsweep-boxed-", dir="/tmp"))  # where the trial user can reach it
    work.chmod(0o755)
    try:
        bucket = "datasets-" + s3_env["SPOTSWEEP_S3_BUCKET"][-8:]
        S3ArtifactStore(s3_env["SPOTSWEEP_S3_ENDPOINT"], s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
                        s3_env["SPOTSWEEP_S3_SECRET_KEY"], bucket).put_bytes("v1/tokens.bin", b"t" * 4096)
        cluster.start("planner", "planner")
        cluster.start("collector", "collector")
        cluster.start("agent", "agent", "--class", "cpu", "--runtime", "docker", "--default-image", IMAGE,
                      "--trial-user", USER, "--workdir", str(work))
        folder = code(tmp_path)
        (folder / "read.py").write_text(READER)
        spec = write_spec(tmp_path / "specs" / "reader.yaml", workdir="../code", command=["python3", "read.py"],
                          inputs=[{"from": f"s3://{bucket}/v1/", "to": "data"}], retries={"max_failures": 0})
        sweep_id, _ = submitted(cluster, spec)
        [row] = ended(cluster.env["SPOTSWEEP_DATABASE_URL"], sweep_id, 1)
        assert row["state"] == "completed", (row, cluster.logs())
        assert row["metrics"]["size"] == 4096 and row["metrics"]["wrote"] == 0.0, row
        assert row["metrics"]["uid"] == pwd.getpwnam(USER).pw_uid, row
    finally:
        cluster.kill_all()
        shutil.rmtree(work, ignore_errors=True)


def test_a_docker_kill_of_a_trial_is_a_crash_retried_with_its_params_and_a_second_agent_on_its_workdir_kills_nothing(
        cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    trial_image("docker")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent(cluster, "first", "docker", tmp_path)
    code(tmp_path)
    spec = write_spec(tmp_path / "specs" / "killed.yaml", workdir="../code",
                      command=["python3", "train.py", "calm", "{n}", "{grad_accum}"],  # halve_batch needs the slot
                      space={"n": [30]}, retries={"max_failures": 1, "on_oom": "halve_batch", "batch_param": "n"},
                      resources={"gpus": 0, "class": "cpu", "memory": "512Mi"})
    sweep_id, _ = submitted(cluster, spec)
    at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'acc'"
    assert (wait_for(database_url, at_step, (sweep_id,), lambda s: (s or 0) >= 2) or 0) >= 2, cluster.logs()
    workdir = tmp_path / "first"
    [running] = left_containers("docker", workdir, "--filter", "status=running")
    agent(cluster, "second", "docker", tmp_path, "--workdir", str(workdir))  # a live agent's workdir
    second = cluster.tmp / "second.log"
    assert wait_until(lambda: second.exists() and "agent ready" in second.read_text(), 60), cluster.logs()  # cleaned up
    assert running in left_containers("docker", workdir, "--filter", "status=running"), cluster.logs()  # untouched
    subprocess.run([need("docker"), "kill", running], check=True, capture_output=True)
    [row] = ended(database_url, sweep_id, 1)
    assert row["state"] == "completed", (row, cluster.logs())
    with psycopg.connect(database_url) as conn:
        failures = [r[0] for r in conn.execute("SELECT body->>'failure' FROM trial_events WHERE sweep_id = %s AND "
                                               "kind = 'trial.finished' ORDER BY recorded_at", (sweep_id,))]
        params = conn.execute("SELECT params FROM trials WHERE sweep_id = %s", (sweep_id,)).fetchone()
    assert "killed" in failures and "oom" not in failures, failures
    assert params is not None and params[0]["n"] == 30  # not halved


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_an_agent_starting_removes_only_the_containers_whose_owning_agent_is_gone(runtime: str, tmp_path: Path) -> None:
    binary = need(runtime)
    trial_image(runtime)
    lock = tmp_path / "agents" / "live.lock"
    lock.parent.mkdir()
    (tmp_path / "agents" / "gone.lock").touch()  # an agent killed outright: its lock file stays, no one holds it
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(300)", str(lock)],
                              stdout=subprocess.PIPE)
    started = []
    try:
        assert holder.stdout is not None and holder.stdout.readline()  # the live agent holds its lock
        for owner in ("live", "gone"):
            started += subprocess.run([binary, "run", "--detach", "--label", f"{LABEL}={tmp_path}", "--label",
                                       f"{INSTANCE}={owner}", "--entrypoint", "sleep", IMAGE, "300"],
                                      capture_output=True, text=True, check=True).stdout.split()
        live, gone = (left_containers(runtime, tmp_path, "--filter", f"label={INSTANCE}={o}") for o in ("live", "gone"))
        Runtime(binary, None, str(tmp_path), "starting").remove_stale()  # a second agent starting on the workdir
        assert left_containers(runtime, tmp_path, "--filter", "status=running") == live  # the live one's runs on
        assert not set(gone) & set(left_containers(runtime, tmp_path))
        assert sorted(f.name for f in lock.parent.iterdir()) == ["live.lock"]  # a gone agent's lock file goes too
        holder.kill()
        holder.wait()
        Runtime(binary, None, str(tmp_path), "next").remove_stale()  # its owner gone too now
        assert not left_containers(runtime, tmp_path)
    finally:
        holder.kill()
        holder.wait()
        if started:
            subprocess.run([binary, "rm", "--force", *started], capture_output=True, check=False)
