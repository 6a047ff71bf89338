"""``spotsweep logs`` and ``spotsweep checkpoint`` after a local-mode sweep
(``spotsweep run``: embedded PostgreSQL, local artifact directory, nothing configured)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

SCRIPT = """
import sys
from spotsweep import trial
for step in (1, 2):
    trial.report(step, loss=1.0 / step)
    (trial.checkpoint_dir / f"w{step}.txt").write_text(str(step))
    trial.checkpoint_saved(step)
    print(f"local step {step}", flush=True)
print("local stderr", file=sys.stderr)
"""


def cli(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=240)


def test_logs_and_checkpoint_of_a_local_sweep(tmp_path: Path) -> None:
    home = tmp_path / "home"
    spec = {"name": "local-arts", "command": ["python", "-c", SCRIPT.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "loss"}, "space": {"x": [1]}, "trial_name": "la_{index}", "resources": {"gpus": 0}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = cli("run", "spec.yaml", "--workers", "1", home=home, cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    logs = cli("logs", "la_0", "--sweep", "local-arts", home=home, cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert "==> stdout (attempt 1) <==\nlocal step 1\nlocal step 2\n" in logs.stdout
    assert "==> stderr (attempt 1) <==\nlocal stderr\n" in logs.stdout

    got = cli("checkpoint", "la_0", "--sweep", "local-arts", "--out", "ck", home=home, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "ck" / "w2.txt").read_text() == "2"  # keep: last leaves the latest
    gone = cli("checkpoint", "la_0", "--sweep", "local-arts", "--out", "ck1", "--step", "1", home=home, cwd=tmp_path)
    assert gone.returncode == 2 and "steps there are: 2" in gone.stderr and "Traceback" not in gone.stderr
