"""Local mode survives its own interruption: Ctrl-C drains, kill -9 orphans nothing, `resume` finishes.

Each test runs ``spotsweep run`` as a user does, a real process with its own
SPOTSWEEP_HOME, over a sweep of four trials: two that end at once and two
that checkpoint at step 5 and then wait at a gate (a file) until the test
releases them. Every start of a trial appends a line (trial, attempt,
resume step, the step its files held, pid) to ``starts.log``, so the tests
count runs and see where each resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.waiting import alive, wait_until

TRIAL = '''
import json, os, signal, sys, time
from pathlib import Path
from spotsweep import trial

out = Path(sys.argv[1])
i = int(trial.params["i"])
state_file = trial.checkpoint_dir / "state.json"
step = json.loads(state_file.read_text())["step"] if state_file.exists() else 0
with open(out / "starts.log", "a") as f:
    f.write(f"{trial.trial_name} {trial.attempt} {trial.resume_step or 0} {step} {os.getpid()}\\n")
stop = False


def on_term(signum, frame):
    global stop
    (out / f"term-{i}").touch()
    stop = not (out / "stubborn").exists()  # a stubborn trial ignores SIGTERM


def save():
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, state_file)
    trial.checkpoint_saved(step)


signal.signal(signal.SIGTERM, on_term)
last = 1 if i < 2 else 10
while step < last:
    if i >= 2 and step == 5:
        (out / f"gate-{i}").touch()
        while not (out / "release").exists() and not stop:
            time.sleep(0.02)
    if stop:
        save()
        sys.exit(143)
    step += 1
    trial.report(step, score=i * 100 + step)
    if step % 5 == 0:
        save()
'''

SPEC = """
name: gated
command: [python, {script}, {out}]
metric: {{name: score, mode: min}}
space:
  i: [0, 1, 2, 3]
max_concurrent: 4
trial_name: "gated_{{i}}"
resources: {{gpus: 0, class: cpu}}
"""


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    (tmp_path / "trial.py").write_text(TRIAL)
    (tmp_path / "spec.yaml").write_text(SPEC.format(script=tmp_path / "trial.py", out=tmp_path))
    return tmp_path


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(home)
    return env


def cli(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=_env(tmp / "home"), cwd=tmp,
                          capture_output=True, text=True, timeout=timeout)


def start_run(tmp: Path) -> subprocess.Popen[str]:
    """``spotsweep run`` in the background, stopped at the gate: both slow trials checkpointed step 5."""
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "run", "spec.yaml", "--workers", "2"],
                            env=_env(tmp / "home"), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    at_gate = wait_until(lambda: (tmp / "gate-2").exists() and (tmp / "gate-3").exists() or proc.poll() is not None, 90)
    assert at_gate and proc.poll() is None, proc.communicate()
    # The step-5 checkpoints are uploaded (their MANIFEST is written last).
    assert wait_until(lambda: len(list((tmp / "home" / "artifacts").rglob("MANIFEST"))) >= 2, 30)
    return proc


def starts(tmp: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Trial name -> (attempt, SPOTSWEEP_RESUME_STEP, the step its files held) per start."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for line in (tmp / "starts.log").read_text().splitlines():
        name, attempt, resume_step, step, _pid = line.split()
        out.setdefault(name, []).append((int(attempt), int(resume_step), int(step)))
    return out


def trial_pids(tmp: Path) -> list[int]:
    return [int(line.split()[-1]) for line in (tmp / "starts.log").read_text().splitlines()]


def postmasters(home: Path) -> list[psutil.Process]:
    """PostgreSQL processes serving the data directory under ``home``."""
    data = str((home / "pg").resolve())
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and data in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def assert_resumed_and_complete(tmp: Path, resumed: subprocess.CompletedProcess[str]) -> None:
    assert resumed.returncode == 0, resumed.stderr
    assert "gated_0" in resumed.stdout and "gated_3" in resumed.stdout  # the leaderboard, as `run` prints it
    runs = starts(tmp)
    assert len(runs["gated_0"]) == len(runs["gated_1"]) == 1  # completed before the stop: never run again
    for slow in ("gated_2", "gated_3"):
        assert len(runs[slow]) == 2
        assert runs[slow][0][1:] == (0, 0)  # a fresh start
        assert runs[slow][1][1:] == (5, 5)  # resumed from its step-5 checkpoint
    status = cli(tmp, "status", resumed.stdout.split()[-1], "--json")
    assert '"completed": 4' in status.stdout, status.stdout


def test_ctrl_c_drains_then_resume_finishes_without_rerunning_completed_trials(sweep: Path) -> None:
    proc = start_run(sweep)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    sweep_id = out.split()[-1]
    assert f"spotsweep resume {sweep_id}" in err
    assert "Traceback" not in err
    assert (sweep / "term-2").exists() and (sweep / "term-3").exists()  # the trials got SIGTERM to checkpoint
    assert not postmasters(sweep / "home")
    status = cli(sweep, "status", sweep_id, "--json")
    assert '"state": "running"' in status.stdout and '"failed": 0' in status.stdout, status.stdout

    (sweep / "release").touch()
    resumed = cli(sweep, "resume", sweep_id, "--csv", "out.csv")
    assert "2 trial(s) in flight when it stopped (2 stopped by the drain)" in " ".join(resumed.stderr.split())
    assert_resumed_and_complete(sweep, resumed)
    assert len((sweep / "out.csv").read_text().splitlines()) == 5
    again = cli(sweep, "resume", sweep_id)
    assert again.returncode == 0 and "already ended: completed" in again.stderr


def test_kill_9_leaves_no_database_server_and_resume_finishes(sweep: Path) -> None:
    proc = start_run(sweep)
    assert proc.stderr is not None
    # The sweep id and the command that goes on come first, before any trial ends: kill -9 leaves no last line.
    first = [proc.stderr.readline() for _ in range(2)]
    proc.kill()
    proc.communicate(timeout=30)
    assert first[0].startswith("sweep gated-") and "go on with:" in first[0], first
    sweep_id = first[0].split()[1]
    assert first[1].strip() == f"spotsweep resume {sweep_id}", first
    assert wait_until(lambda: not postmasters(sweep / "home"), 15), "the embedded PostgreSQL outlived its owner"
    assert wait_until(lambda: not any(alive(pid) for pid in trial_pids(sweep)), 15)

    (sweep / "release").touch()
    assert_resumed_and_complete(sweep, cli(sweep, "resume", sweep_id))
    # The two runs that died with the process are counted as lost, as a lost agent's are in a cluster.
    listed = {r["trial_name"]: r["losses"] for r in json.loads(cli(sweep, "ls", "--filter", f"sweep={sweep_id}", "--json").stdout)}
    assert listed == {"gated_0": 0, "gated_1": 0, "gated_2": 1, "gated_3": 1}, listed
    assert "+1 lost run" in cli(sweep, "ls", "--filter", f"sweep={sweep_id}").stdout


def test_a_second_ctrl_c_stops_at_once_and_cancel_works_without_rabbitmq(sweep: Path) -> None:
    (sweep / "stubborn").touch()  # the trials ignore SIGTERM: a drain would take the whole grace
    proc = start_run(sweep)
    proc.send_signal(signal.SIGINT)
    assert wait_until(lambda: (sweep / "term-2").exists() and (sweep / "term-3").exists(), 30)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 137, err
    assert "stopping now" in err and "spotsweep resume" in err
    assert wait_until(lambda: not any(alive(pid) for pid in trial_pids(sweep)), 15)
    assert wait_until(lambda: not postmasters(sweep / "home"), 15)

    sweep_id = err.split("spotsweep resume ")[1].split()[0]
    env_has_no_broker = cli(sweep, "cancel", sweep_id)  # SPOTSWEEP_DATABASE_URL unset: local mode, no RabbitMQ
    assert env_has_no_broker.returncode == 0, env_has_no_broker.stderr
    assert f"sweep {sweep_id} cancelled" in env_has_no_broker.stdout
    assert '"state": "cancelled"' in cli(sweep, "status", sweep_id, "--json").stdout
    resumed = cli(sweep, "resume", sweep_id)
    assert resumed.returncode == 0 and "already ended: cancelled" in resumed.stderr
    unknown = cli(sweep, "resume", "gated-00000000")
    assert unknown.returncode == 2 and "no sweep with id 'gated-00000000'" in unknown.stderr


def test_cancel_of_a_sweep_a_local_run_is_running_stops_that_run(sweep: Path) -> None:
    proc = start_run(sweep)
    status = cli(sweep, "status", "--json")
    sweep_id = status.stdout.split('"sweep_id": "')[1].split('"')[0]
    twice = cli(sweep, "resume", sweep_id)  # one process runs a sweep at a time
    assert twice.returncode == 2 and "being run by another spotsweep process" in twice.stderr, twice.stderr
    cancelled = cli(sweep, "cancel", sweep_id)
    assert cancelled.returncode == 0 and "stops its trials" in cancelled.stdout, cancelled.stderr
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # the sweep did not complete
    assert f"sweep {sweep_id}: cancelled" in err
    assert wait_until(lambda: not any(alive(pid) for pid in trial_pids(sweep)), 15)
