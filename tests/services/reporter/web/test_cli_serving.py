"""The dashboard as a user starts it: ``spotsweep dashboard`` over local mode's
database, and ``spotsweep run SPEC --dashboard PORT`` while a sweep runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from servers import free_port

SLOW = "import time; from spotsweep import trial; trial.report(1, score=trial.params['x']); time.sleep(2)"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(home)
    return env


def _get(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


def test_run_serves_the_dashboard_while_its_sweep_runs(tmp_path: Path) -> None:
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({"name": "slow", "command": ["python", "-c", SLOW], "metric": {"name": "score"},
                                    "space": {"x": [1, 2, 3, 4]}, "resources": {"gpus": 0, "class": "cpu"}}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "run", str(spec), "--workers", "2", "--dashboard", str(port)],
                            env=_env(tmp_path / "home"), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen: list[object] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            sweeps = _get(f"http://127.0.0.1:{port}/api/sweeps")
            if sweeps:
                seen.append(sweeps)
            time.sleep(0.3)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert f"dashboard: http://127.0.0.1:{port}/" in err
    running = [s for sweeps in seen for s in sweeps if s["name"] == "slow" and s["state"] == "running"]  # type: ignore[attr-defined]
    assert running, f"the dashboard never showed the running sweep: {seen[-1:]}"
    assert _get(f"http://127.0.0.1:{port}/healthz") is None  # stopped with the run


def test_dashboard_command_serves_local_modes_database(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "dashboard", "--port", str(port)], env=_env(tmp_path / "home"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (health := _get(f"http://127.0.0.1:{port}/healthz")) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert health == {"ok": True}
        assert _get(f"http://127.0.0.1:{port}/api/sweeps") == []
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
