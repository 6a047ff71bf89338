"""ASHA on the MLP example, in local mode: promotions resume with a larger --steps.

The docs show examples/mlp with every strategy; under ASHA a promoted trial is
the same trial resumed from its checkpoint with ``{steps}`` raised, which the
script accepts when ``--lr-horizon`` fixes its schedule. Without it the script
refuses the resume: each promoted trial then fails once (the same refusal
again ends it, no four attempts), and a sweep with no completed trial ends
``failed``, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "train.py"

SPEC = """
name: mlp-asha
command: [python, {train}, --lr, "{{lr}}", --steps, "{{steps}}", --eval-every, "3", --ckpt-every, "3"{horizon}]
metric: {{name: val_loss, mode: min}}
space:
  lr: [0.001, 0.003, 0.01]
strategy: {{type: asha, budget: {{param: steps, min: 3, max: 9}}, eta: 3, promotion: async}}
max_concurrent: 3
resources: {{gpus: 0, class: cpu}}
"""


def run(tmp: Path, horizon: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]], dict[str, object]]:
    (tmp / "spec.yaml").write_text(SPEC.format(train=TRAIN, horizon=horizon))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(tmp / "home")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=tmp, capture_output=True,
                              text=True, timeout=300)

    ran = cli("run", "spec.yaml")
    sweep_id = ran.stdout.split()[-1]
    listed = cli("ls", "--filter", f"sweep={sweep_id}", "--json")
    assert listed.returncode == 0, (ran.stdout, listed.stderr)
    trials = json.loads(listed.stdout)
    return ran, trials, json.loads(cli("status", sweep_id, "--json").stdout)[0]


def test_asha_promotes_the_mlp_example_when_its_schedule_horizon_is_fixed(tmp_path: Path) -> None:
    ran, trials, sweep = run(tmp_path, ', --lr-horizon, "9"')
    assert ran.returncode == 0, ran.stderr
    assert sweep["state"] == "completed" and sweep["failed"] == 0
    promoted = [t for t in trials if t["state"] == "completed"]
    assert promoted and all(t["params"]["steps"] == 9 for t in promoted)


def test_a_refused_resume_fails_each_promoted_trial_once_and_the_sweep_says_none_completed(tmp_path: Path) -> None:
    ran, trials, sweep = run(tmp_path, "")
    assert ran.returncode == 1
    failed = [t for t in trials if t["state"] == "failed"]
    assert failed and sweep["completed"] == 0
    # The rung-3 run, the promoted resume refused, and the same refusal again: no more.
    assert all(t["attempts"] == 3 for t in failed), [(t["trial_name"], t["attempts"]) for t in failed]
    assert sweep["state"] == "failed"
    assert "no trial completed" in sweep["error"] and "lr_horizon: 3 in the checkpoint, 9 now" in sweep["error"]
