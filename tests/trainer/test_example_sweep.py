"""The DeepSeek example through ``spotsweep run``: real trial processes, the embedded database, a leaderboard.

The spec is examples/deepseek-small.yaml with fewer steps and two trials: one
that trains and one whose learning rate makes it diverge, so the test also
sees the trainer's "diverged" line become the trial's recorded error.
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _flag(command: list[str], flag: str, value: str) -> list[str]:
    i = command.index(flag)
    return [*command[: i + 1], value, *command[i + 2 :]]


def test_the_small_deepseek_sweep_runs_end_to_end(tmp_path: Path) -> None:
    spec = yaml.safe_load((EXAMPLES / "deepseek-small.yaml").read_text())
    command = spec["command"]
    for flag, value in (("--steps", "6"), ("--lr-horizon", "6"), ("--eval-every", "3"), ("--ckpt-every", "3")):
        command = _flag(command, flag, value)
    spec.update(command=[*command, "--grad-clip", "0"], retries={"max_failures": 0}, name="deepseek-test")
    spec["space"].update(learning_rate=[0.1, 1.0e6], optimizer=["sgd"])
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(tmp_path / "home")
    proc = subprocess.run([sys.executable, "-m", "spotsweep", "run", str(path), "--workers", "2", "--csv", "out.csv"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]  # one trial failed, as it should
    rows = {r["learning_rate"]: r for r in csv.DictReader((tmp_path / "out.csv").open())}
    good, bad = rows["0.1"], rows["1000000.0"]
    assert good["state"] == "completed" and good["optimizer"] == "sgd" and good["hidden_layers"] == "2"
    assert 0 < float(good["val_loss"]) < math.log(256)  # below the loss of a uniform guess over bytes
    assert float(good["tokens_per_s"]) > 0
    assert bad["state"] == "failed" and "diverged" in bad["error"], bad
    assert "Traceback" not in proc.stderr
    # every trial read the one corpus file built in the shared data directory
    assert [p.suffix for p in (tmp_path / "home" / "data").iterdir() if not p.name.startswith(".")] == [".u8"]
