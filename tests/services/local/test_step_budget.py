"""``budget.max_steps`` end to end in local mode (``spotsweep run``, the same
planner, agent and collector handlers over the embedded PostgreSQL): an ASHA
sweep stops launching when the next trial's first rung would pass the cap,
says why, and ``status`` and ``report`` show the budget spent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TRAIN = ("from spotsweep import trial\n"
         "x, steps = trial.params['x'], trial.params['steps']\n"
         "for s in range(1, steps + 1):\n"
         "    trial.report(s, loss=0.1 * x + 1 / s)\n")
SPEC = f"""
name: stepcap
command: [python, -c, {json.dumps(TRAIN)}]
metric: {{name: loss, mode: min}}
space: {{x: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
strategy: {{type: asha, budget: {{param: steps, min: 1, max: 9}}, eta: 3, order: listed, promotion: async}}
budget: {{max_steps: 12, max_gpu_hours: 10}}
max_concurrent: 1
resources: {{gpus: 0, class: cpu}}
"""


def cli(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env.update(SPOTSWEEP_HOME=str(home), COLUMNS="200")  # no line of the output wrapped
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=240)


def test_a_local_asha_sweep_stops_at_max_steps_and_shows_the_budget_spent(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    home = tmp_path / "home"
    proc = cli("run", "spec.yaml", home=home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sweep_id = proc.stdout.strip().splitlines()[-1]
    # The first trial climbs 1 -> 3 -> 9 steps (resumed each time); three more are pruned at 1 step: 12 in all,
    # and a fifth (1 step more) would pass the cap.
    why = "budget.max_steps: 12 step(s) trained, 13 expected with one more trial, the cap is 12"
    assert why in proc.stdout + proc.stderr
    assert "budget: 12/12 steps, 0.00/10 GPU-h" in proc.stdout  # the report run prints at its end
    status = cli("status", sweep_id, home=home, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert f"{sweep_id}: {why}" in status.stdout and f"{sweep_id}: budget: 12/12 steps, 0.00/10 GPU-h" in status.stdout
    report = cli("report", sweep_id, home=home, cwd=tmp_path)
    assert "budget: 12/12 steps, 0.00/10 GPU-h" in report.stdout
    [row] = json.loads(cli("status", sweep_id, "--json", home=home, cwd=tmp_path).stdout)
    assert (row["steps"], row["trials"], row["completed"], row["pruned"]) == (12, 4, 1, 3)
    assert (row["budget"]["max_steps"], row["budget"]["max_gpu_hours"]) == (12, 10)
