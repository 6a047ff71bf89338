"""``spotsweep logs`` and ``spotsweep checkpoint`` after a local-mode sweep
(``spotsweep run``: embedded PostgreSQL, local artifact directory, nothing configured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from spotsweep.shared.artifacts.checkpoint_layout import checkpoint_prefix
from spotsweep.shared.artifacts.local import LocalArtifactStore

SCRIPT = """
import sys
from spotsweep import trial
if int(trial.params["x"]) == 2:
    trial.report(1, loss=0.5)
    sys.exit(0)  # a trial that prints nothing
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
            "metric": {"name": "loss"}, "space": {"x": [1, 2]}, "trial_name": "la_{index}", "resources": {"gpus": 0}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = cli("run", "spec.yaml", "--workers", "1", home=home, cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    logs = cli("logs", "la_0", "--sweep", "local-arts", home=home, cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert "==> stdout (attempt 1) <==\nlocal step 1\nlocal step 2\n" in logs.stdout
    assert "==> stderr (attempt 1) <==\nlocal stderr\n" in logs.stdout
    silent = cli("logs", "la_1", "--sweep", "local-arts", home=home, cwd=tmp_path)
    assert silent.returncode == 0 and silent.stdout == "", silent
    assert "has no logs: it printed nothing, or never ran (state completed)" in silent.stderr  # not "yet": it ended

    got = cli("checkpoint", "la_0", "--sweep", "local-arts", "--out", "ck", home=home, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "ck" / "w2.txt").read_text() == "2"  # keep: last leaves the latest
    gone = cli("checkpoint", "la_0", "--sweep", "local-arts", "--out", "ck1", "--step", "1", home=home, cwd=tmp_path)
    assert gone.returncode == 2 and "steps there are: 2" in gone.stderr and "Traceback" not in gone.stderr


ASHA = """
import sys
from spotsweep import trial
x, steps = float(sys.argv[1]), int(sys.argv[2])
start = trial.resume_step or 0
for step in range(start + 1, steps + 1):
    trial.report(step, loss=x + 1 / step)
    (trial.checkpoint_dir / "w.txt").write_text(str(step))
    trial.checkpoint_saved(step)
"""


def test_trials_pruned_at_a_rung_leave_no_checkpoint(tmp_path: Path) -> None:
    """Successive halving prunes a trial on the end of its run, after its agent let go of it:
    the planner deletes its checkpoints (keep: last); promoted and completed trials keep their latest."""
    home = tmp_path / "home"
    spec = {"name": "asha-ckpt", "command": ["python", "-c", ASHA.replace("{", "{{").replace("}", "}}"), "{x}", "{steps}"],
            "metric": {"name": "loss"}, "space": {"x": [1, 2, 3, 4, 5, 6]}, "max_concurrent": 1,
            "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3},
            "resources": {"gpus": 0}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = cli("run", "spec.yaml", "--workers", "1", "--csv", "out.csv", home=home, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    import csv

    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    pruned = [r["trial_name"] for r in rows if r["state"] == "pruned"]
    completed = [r["trial_name"] for r in rows if r["state"] == "completed"]
    assert len(pruned) >= 3 and completed
    listed = cli("ls", "--json", home=home, cwd=tmp_path)
    ids = {r["trial_name"]: (r["sweep_id"], r["trial_id"]) for r in json.loads(listed.stdout)}
    store = LocalArtifactStore(home / "artifacts")
    for name in pruned:
        assert store.list(checkpoint_prefix(*ids[name])) == [], name  # every key gone, not only the manifest
        got = cli("checkpoint", name, "--sweep", "asha-ckpt", "--out", f"ck-{name}", home=home, cwd=tmp_path)
        assert got.returncode == 2 and "has no complete checkpoint" in got.stderr, (name, got.stderr)
    for name in completed:
        got = cli("checkpoint", name, "--sweep", "asha-ckpt", "--out", f"ck-{name}", home=home, cwd=tmp_path)
        assert got.returncode == 0 and (tmp_path / f"ck-{name}" / "w.txt").read_text() == "9", got.stderr
