"""Population-based training end to end in local mode (``spotsweep run``: the real
planner, agent and collector in one process, PostgreSQL, a local artifact directory):
exploits copy the donor's checkpoint, the next run resumes from it, and the
lineage in ``trial_segments`` says so."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import yaml
from psycopg.rows import dict_row

# A toy model whose checkpoint carries its "weights" (w) and who wrote them:
# the loss falls faster with a larger lr, so ranks are stable and exploits happen.
SCRIPT = """
import json, sys
from spotsweep import trial
lr, steps = float(sys.argv[1]), int(sys.argv[2])
start = trial.resume_step or 0
state = {"w": 10.0, "by": []}
if start:
    state = json.loads((trial.checkpoint_dir / "state.json").read_text())
for step in range(start + 1, steps + 1):
    state["w"] *= 1 - lr
    trial.report(step, loss=state["w"])
state["by"].append([trial.trial_name, steps])
(trial.checkpoint_dir / "state.json").write_text(json.dumps(state))
trial.checkpoint_saved(steps)
"""


def cli(*args: str, home: Path, cwd: Path, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env.update(SPOTSWEEP_HOME=str(home), SPOTSWEEP_DATABASE_URL=database_url)
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=240)


def test_pbt_exploits_resume_from_the_donor_and_lineage_says_so(tmp_path: Path, database_url: str) -> None:
    spec = {"name": "pbt-local", "command": ["python", "-c", SCRIPT.replace("{", "{{").replace("}", "}}"), "{lr}",
                                              "{steps}"],
            "metric": {"name": "loss"}, "space": {"lr": [0.05, 0.1, 0.2, 0.4]}, "max_concurrent": 4,
            "strategy": {"type": "pbt", "population": 4, "interval": {"param": "steps", "every": 2, "max": 8},
                         "quantile": 0.5, "mutations": {"lr": {"values": [0.05, 0.1, 0.2, 0.4]}},
                         "resample_probability": 0.0, "seed": 1},
            "trial_name": "m{index}", "resources": {"gpus": 0}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = cli("run", "spec.yaml", "--workers", "4", "--csv", "out.csv", home=tmp_path / "home", cwd=tmp_path,
              database_url=database_url)
    assert run.returncode == 0, run.stderr[-3000:]
    results = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert sorted(r["state"] for r in results) == ["completed"] * 4

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        segments = conn.execute("SELECT * FROM trial_segments ORDER BY trial_name, segment").fetchall()
        points = conn.execute("SELECT trial_id, attempt, min(step) AS first FROM metric_points"
                              " GROUP BY trial_id, attempt").fetchall()
        final = {r["trial_name"]: r for r in conn.execute("SELECT trial_name, params FROM trial_results").fetchall()}
    first_step = {(p["trial_id"], p["attempt"]): p["first"] for p in points}
    by_trial: dict[str, list[dict]] = {}
    for s in segments:
        by_trial.setdefault(s["trial_name"], []).append(s)
    assert sorted(by_trial) == ["m0", "m1", "m2", "m3"]
    for name, segs in by_trial.items():
        assert [s["segment"] for s in segs] == list(range(1, len(segs) + 1)), name
        assert segs[0]["start_step"] == 0 and segs[0]["end_step"] == 2 and segs[0]["from_trial_id"] is None
        assert segs[-1]["end_step"] == 8, name  # every trial trains to max
        for before, after in zip(segs, segs[1:]):
            assert after["start_step"] == before["end_step"] and after["attempt"] == before["attempt"] + 1
            assert before["value"] is not None  # the value it ended with is recorded
        # The final result row shows the params of the last segment.
        assert final[name]["params"] == segs[-1]["params"], name

    exploits = [s for s in segments if s["from_trial_id"] is not None]
    assert exploits, "with quantile 0.5 every segment end below the best exploits"
    for s in exploits:
        assert s["copied_at"] is not None and s["copy_note"] is None and s["from_step"] is not None, s
        assert s["from_trial_name"] in by_trial and s["from_trial_name"] != s["trial_name"]
        # The run after the exploit resumed from the donor's checkpoint step, not its own.
        assert first_step.get((s["trial_id"], s["attempt"])) in (s["from_step"] + 1, None), s
        # Explore moved lr to a neighbour of the donor's (or kept it at an end of the list): the donor's
        # params when the planner decided, those of the segment that saved the checkpoint or of its next one.
        donor_lrs = [d["params"]["lr"] for d in by_trial[s["from_trial_name"]]
                     if d["start_step"] <= s["from_step"] <= d["end_step"]]
        values = [0.05, 0.1, 0.2, 0.4]
        assert any(abs(values.index(s["params"]["lr"]) - values.index(lr)) <= 1 for lr in donor_lrs), s
    assert any(first_step.get((s["trial_id"], s["attempt"])) == s["from_step"] + 1 for s in exploits)

    # The report shows each trial's lineage: its segments and the checkpoint each continued from.
    report = cli("report", "pbt-local", home=tmp_path / "home", cwd=tmp_path, database_url=database_url)
    assert report.returncode == 0, report.stderr
    assert "Lineage" in report.stdout
    s = exploits[0]
    assert f"{s['trial_name']}: 0-2 · " in report.stdout
    assert f"{s['start_step']}-{s['end_step']} from {s['from_trial_name']}@{s['from_step']}" in report.stdout

    # The trial's checkpoint after an exploit holds the donor's history: its weights were copied.
    store = tmp_path / "home" / "artifacts"
    last = max(exploits, key=lambda s: s["segment"])  # that trial's last exploit: its checkpoint came from this donor
    assert not [s for s in exploits if s["trial_id"] == last["trial_id"] and s["segment"] > last["segment"]]
    latest = json.loads((store / "sweeps" / last["sweep_id"] / "trials" / last["trial_id"] / "checkpoints" / "LATEST")
                        .read_text())
    state = json.loads(next((store / "sweeps" / last["sweep_id"] / "trials" / last["trial_id"] / "checkpoints" /
                             latest["folder"]).rglob("state.json")).read_text())
    assert [last["from_trial_name"], last["from_step"]] in state["by"]
