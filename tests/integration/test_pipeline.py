"""A real sweep through RabbitMQ, PostgreSQL and S3 (moto), every service a
separate ``spotsweep`` process, as a user would run them on a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from spotsweep.shared.artifacts.s3 import S3ArtifactStore

pytestmark = pytest.mark.integration

# Each trial checkpoints at step 1, reports at step 2; trial 0 crashes on its
# first attempt after its checkpoint, so its retry must resume from step 1.
SCRIPT = """
import os, pathlib, sys
from spotsweep import trial
p = trial.params
ckpt = trial.checkpoint_dir / "state.txt"
start = int(ckpt.read_text()) if trial.resume_step is not None else 0
trial.report(1, score=p["x"] ** 2 + p["y"], resumed_from=float(start))
ckpt.write_text("1")
trial.checkpoint_saved(1)
if trial.attempt == 1 and p["x"] == -1 and p["y"] == 0:
    print("crashing on purpose", file=sys.stderr)
    sys.exit(3)
trial.report(2, score=p["x"] ** 2 + p["y"] + 0.5, resumed_from=float(start))
"""

SPEC: dict[str, Any] = {
    "name": "integ",
    "command": ["python", "-c", SCRIPT.replace("{", "{{").replace("}", "}}")],
    "metric": {"name": "score", "mode": "min"},
    "space": {"x": [-1, 0, 1], "y": [0, 1, 2]},
    "max_concurrent": 4,
    "retries": {"max_failures": 2},
    "resources": {"gpus": 0, "class": "cpu"},
    "trial_name": "integ_{index:02d}",
}


def spotsweep(*args: str) -> list[str]:
    return [sys.executable, "-m", "spotsweep", *args]


@pytest.fixture()
def env(rabbit_url: str, database_url: str, s3_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPOTSWEEP_AMQP_URL": rabbit_url,
        "SPOTSWEEP_DATABASE_URL": database_url,
        "SPOTSWEEP_HOME": str(tmp_path / "home"),
        **s3_env,
    }


def test_sweep_through_rabbitmq_postgres_and_s3(env: dict[str, str], tmp_path: Path, database_url: str) -> None:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    logs = tmp_path / "logs"
    logs.mkdir()
    # Submitted before any service runs: the spec must wait durably.
    submit = subprocess.run(spotsweep("submit", str(spec_path)), env=env, capture_output=True, text=True, timeout=60)
    assert submit.returncode == 0, submit.stderr
    sweep_id = submit.stdout.strip().splitlines()[-1]

    procs: dict[str, subprocess.Popen[bytes]] = {}
    commands = {
        "planner": spotsweep("planner"),
        "collector": spotsweep("collector"),
        "agent1": spotsweep("agent", "--slots", "2", "--class", "cpu", "--workdir", str(tmp_path / "w1")),
        "agent2": spotsweep("agent", "--slots", "2", "--class", "cpu", "--workdir", str(tmp_path / "w2")),
    }
    try:
        for name, cmd in commands.items():
            procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=(logs / f"{name}.log").open("wb"))
        waited = subprocess.run(spotsweep("submit", str(spec_path), "--wait", "--timeout", "90"), env=env,
                                capture_output=True, text=True, timeout=120)
        assert waited.returncode == 0, waited.stderr + _logs(logs)
        second = waited.stdout.strip().splitlines()[-1]
        _wait_done(database_url, sweep_id, 60)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        codes = {name: p.wait(30) for name, p in procs.items()}
    assert codes == {name: 0 for name in commands}, _logs(logs)

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT trial_name, state, params, metrics, attempts, error FROM trial_results WHERE sweep_id = %s ORDER BY trial_name",
            (sweep_id,),
        ).fetchall()
        points = conn.execute(
            "SELECT trial_id, attempt, step, name, value FROM metric_points WHERE sweep_id = %s AND name = 'score'", (sweep_id,)
        ).fetchall()
        dups = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM metric_points GROUP BY trial_id, attempt, step, name HAVING count(*) > 1) d"
        ).fetchone()[0]
        other = conn.execute("SELECT state FROM sweeps WHERE sweep_id = %s", (second,)).fetchone()[0]
    assert len(rows) == 9 and {r[1] for r in rows} == {"completed"}
    assert other == "completed"
    for name, _, params, metrics, attempts, _ in rows:
        assert metrics["score"] == params["x"] ** 2 + params["y"] + 0.5, name
        crashed = params == {"x": -1, "y": 0}
        assert attempts == (2 if crashed else 1), name
        # The retry restored the checkpoint of attempt 1 and resumed from it.
        assert metrics["resumed_from"] == (1.0 if crashed else 0.0), name
    # Attempt 1 of the crashed trial reported step 1 only; the retry steps 1 and 2.
    assert len(points) == 9 * 2 + 1 and dups == 0

    store = S3ArtifactStore.from_settings(_settings(env))
    keys = store.list(f"sweeps/{sweep_id}/")
    assert sum(k.endswith("/stderr.log") for k in keys) == 1  # logs that are not empty: the crash's stderr
    assert any(k.endswith("LATEST") for k in keys)
    crashed_log = [k for k in keys if k.endswith("attempt-1/stderr.log") and store.get_bytes(k)]
    assert len(crashed_log) == 1 and b"crashing on purpose" in store.get_bytes(crashed_log[0])


def _settings(env: dict[str, str]) -> Any:
    from spotsweep.shared.settings import Settings

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _wait_done(database_url: str, sweep_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()
            if row and row[0] != "running":
                return
            time.sleep(0.2)
    raise AssertionError(f"sweep {sweep_id} still running after {timeout}s")


def _logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.iterdir()))
