"""``spotsweep.integrations.transformers.SpotsweepCallback``: a Hugging Face Trainer script as a trial (issue 41).

The script is ``hf_trial.py`` beside this file: a tiny DeepseekV3 built from a
config, synthetic token ids, 24 steps, a checkpoint every 6 and a log every 2.
A run preempted by SIGTERM and resumed from its checkpoint must end with the
uninterrupted run's losses and final ``eval_loss``; through the real services,
a second agent resumes what the first one's SIGTERM stopped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

HF_TRIAL = Path(__file__).with_name("hf_trial.py")
sys.path.insert(0, str(HF_TRIAL.parent))
LOGGED = list(range(2, 25, 2))  # logging_steps=2, max_steps=24
EVALUATED = [6, 12, 18, 24]  # eval_steps = save_steps = 6


def run_script(tmp: Path, name: str, *args: str, script: str = str(HF_TRIAL),
               **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """One attempt of the trial with the contract's variables, as an agent would start it; its metric lines."""
    metrics = tmp / f"{name}.jsonl"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    full_env |= {"SPOTSWEEP_METRICS": str(metrics), "SPOTSWEEP_CHECKPOINT_DIR": str(tmp / "ckpt"),
                 "SPOTSWEEP_TRIAL_ID": "t.0", "HF_HUB_OFFLINE": "1", **env}
    (tmp / "ckpt").mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, script, *args], env=full_env, cwd=tmp, capture_output=True,
                          text=True, timeout=240)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return proc, lines


def points(lines: list[dict], name: str) -> dict[int, float]:
    """``name``'s value at each step; a step reported twice fails."""
    out: dict[int, float] = {}
    for line in lines:
        if name in line:
            assert line["step"] not in out, f"{name} reported twice at step {line['step']}"
            out[line["step"]] = line[name]
    return out


def close(a: dict[int, float], b: dict[int, float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[s], b[s], rel_tol=1e-6) for s in a)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    proc, lines = run_script(tmp_path_factory.mktemp("full"), "full")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return lines


def test_a_sigterm_saves_at_that_step_and_the_resumed_run_ends_as_the_uninterrupted_one(
        tmp_path: Path, uninterrupted: list[dict]) -> None:
    first, lines1 = run_script(tmp_path, "a1", "--sigterm-at", "9")
    assert first.returncode == 143, first.stderr[-3000:]  # saved at step 9's end, then exited as preempted
    assert [line["checkpoint"] for line in lines1 if "checkpoint" in line] == [6, 9]
    ckpt = tmp_path / "ckpt"
    assert [p.name for p in ckpt.iterdir()] == ["checkpoint-9"]  # save_total_limit aside: the newest only
    assert (ckpt / "checkpoint-9" / ".spotsweep-complete").exists()
    # A folder the Trainer was writing when the agent snapshotted checkpoint 9: never announced, dropped.
    (ckpt / "checkpoint-12").mkdir()
    (ckpt / "checkpoint-12" / "model.safetensors").write_bytes(b"half a file")

    second, lines2 = run_script(tmp_path, "a2", SPOTSWEEP_ATTEMPT="2", SPOTSWEEP_RESUME_STEP="9")
    assert second.returncode == 0, second.stderr[-3000:]
    loss1, loss2 = points(lines1, "loss"), points(lines2, "loss")
    assert list(loss1) == [2, 4, 6, 8] and list(loss2) == LOGGED[4:]
    # Training continued exactly: every logged value is the uninterrupted run's, but for the loss logged first
    # after the resume, which the Trainer averages over the steps since the checkpoint (step 10 alone, not 9-10).
    full = points(uninterrupted, "loss")
    assert close({s: v for s, v in (loss1 | loss2).items() if s != 10}, {s: v for s, v in full.items() if s != 10})
    for name in ("grad_norm", "learning_rate"):
        assert close(points(lines1, name) | points(lines2, name), points(uninterrupted, name)), name
    evals = points(lines1, "eval_loss") | points(lines2, "eval_loss")
    assert list(evals) == EVALUATED and close(evals, points(uninterrupted, "eval_loss"))


def test_lora_adapters_resume_as_exactly(tmp_path: Path) -> None:
    """PEFT: the checkpoint holds the adapters only (the Trainer reloads them); the base is the script's own."""
    (tmp_path / "full").mkdir()
    full, lines = run_script(tmp_path / "full", "full", "--lora")
    assert full.returncode == 0, full.stderr[-3000:]
    first, lines1 = run_script(tmp_path, "a1", "--lora", "--sigterm-at", "9")
    assert first.returncode == 143, first.stderr[-3000:]
    assert (tmp_path / "ckpt" / "checkpoint-9" / "adapter_model.safetensors").exists()
    second, lines2 = run_script(tmp_path, "a2", "--lora", SPOTSWEEP_ATTEMPT="2", SPOTSWEEP_RESUME_STEP="9")
    assert second.returncode == 0, second.stderr[-3000:]
    assert close(points(lines1, "eval_loss") | points(lines2, "eval_loss"), points(lines, "eval_loss"))


def test_the_accelerate_recipe_resumes_exactly(tmp_path: Path) -> None:
    """docs/trial-contract.md's plain-loop recipe (accelerate_trial.py): SIGTERM at step 9, resumed, same end."""
    script = str(HF_TRIAL.with_name("accelerate_trial.py"))
    (tmp_path / "full").mkdir()
    full, lines = run_script(tmp_path / "full", "full", script=script)
    assert full.returncode == 0, full.stderr[-3000:]
    first, lines1 = run_script(tmp_path, "a1", "--sigterm-at", "9", script=script)
    assert first.returncode == 143, first.stderr[-3000:]
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["state-9"]
    second, lines2 = run_script(tmp_path, "a2", SPOTSWEEP_ATTEMPT="2", SPOTSWEEP_RESUME_STEP="9", script=script)
    assert second.returncode == 0, second.stderr[-3000:]
    assert close(points(lines1, "loss") | points(lines2, "loss"), points(lines, "loss"))
    assert close(points(lines2, "eval_loss"), points(lines, "eval_loss"))


def test_each_log_and_evaluation_is_reported_once_per_step_numbers_only(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import TrainerControl, TrainerState

    from spotsweep import trial
    from spotsweep.integrations.transformers import SpotsweepCallback

    monkeypatch.setattr(trial, "_TRIAL", dataclasses.replace(trial._TRIAL, metrics_path=tmp_path / "m.jsonl"))
    cb, state, control = SpotsweepCallback(), TrainerState(global_step=3), TrainerControl()
    cb.on_log(None, state, control, logs={"loss": 1.5, "note": "text", "flag": True, "lr": 1e-3})  # type: ignore[arg-type]
    cb.on_log(None, state, control, logs={"eval_loss": 2.5, "epoch": 0.5})  # type: ignore[arg-type]
    cb.on_evaluate(None, state, control, metrics={"eval_loss": 2.5, "epoch": 0.5})  # type: ignore[arg-type]
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert lines == [{"step": 3, "loss": 1.5, "lr": 1e-3}, {"step": 3, "eval_loss": 2.5, "epoch": 0.5}]


@pytest.mark.parametrize(("setting", "value"), [("output_dir", "elsewhere"), ("save_strategy", "no"),
                                                ("save_only_model", True), ("ignore_data_skip", True)])
def test_settings_that_cannot_resume_are_refused_naming_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    setting: str, value: Any) -> None:
    import hf_trial
    from transformers import Trainer, TrainingArguments

    from spotsweep import trial
    from spotsweep.integrations.transformers import SpotsweepCallback

    monkeypatch.setattr(trial, "_TRIAL", dataclasses.replace(trial._TRIAL, checkpoint_dir=tmp_path / "ckpt"))
    kwargs: dict[str, Any] = {"output_dir": str(tmp_path / "ckpt"), "save_steps": 2, "max_steps": 2, "use_cpu": True,
                              "report_to": []}
    kwargs[setting] = str(tmp_path / value) if setting == "output_dir" else value
    with pytest.raises(ValueError, match=rf"TrainingArguments\.{setting}="):
        Trainer(model=hf_trial.tiny_model(), args=TrainingArguments(**kwargs), train_dataset=hf_trial.dataset(8, 0),
                callbacks=[SpotsweepCallback()])


def test_a_trainer_trial_whose_agent_is_stopped_ends_on_another_as_the_uninterrupted_run(
        cluster: Any, database_url: str, uninterrupted: list[dict]) -> None:
    from cluster import wait_for  # tests/support

    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    first = cluster.start("first", "agent", "--class", "cpu", "--workdir", str(cluster.tmp / "w1"))
    sweep_id = cluster.submit({
        "name": "hf", "command": [sys.executable, str(HF_TRIAL), "--sleep", "0.4"],
        "metric": {"name": "eval_loss", "mode": "min"}, "space": {"lr": [0.003]},
        "resources": {"gpus": 0, "class": "cpu"}, "env": {"HF_HUB_OFFLINE": "1"}})
    at_step = "SELECT max(step) FROM metric_points WHERE sweep_id = %s AND name = 'loss'"
    assert (wait_for(database_url, at_step, (sweep_id,), lambda s: (s or 0) >= 8, timeout=180) or 0) >= 8, cluster.logs()
    cluster.term("first")  # the node goes away: the agent passes SIGTERM to the trial and hands it back
    assert first.wait(120) == 0, cluster.logs()
    cluster.start("second", "agent", "--class", "cpu", "--workdir", str(cluster.tmp / "w2"))
    state = wait_for(database_url, "SELECT state FROM trials WHERE sweep_id = %s", (sweep_id,),
                     lambda s: s == "completed", timeout=240)
    assert state == "completed", cluster.logs()

    with psycopg.connect(database_url) as conn:
        final, preemptions, attempts = conn.execute(
            "SELECT (metrics->>'eval_loss')::float8, preemptions, attempts FROM trial_results WHERE sweep_id = %s",
            (sweep_id,)).fetchone()
        rows = conn.execute("SELECT step, attempt, value FROM metric_points WHERE sweep_id = %s AND name = %s"
                            " ORDER BY step", (sweep_id, "grad_norm")).fetchall()
        resumed = conn.execute("SELECT (body->>'resume_step')::int FROM trial_events WHERE sweep_id = %s"
                               " AND kind = 'trial.started' AND attempt = 2", (sweep_id,)).fetchone()[0]
    assert (preemptions, attempts) == (1, 2) and resumed >= 8
    assert math.isclose(final, points(uninterrupted, "eval_loss")[24], rel_tol=1e-6)
    # Each logged step once over both attempts (the checkpoint was taken at the SIGTERM's step), as logged uninterrupted.
    assert [r[0] for r in rows] == LOGGED and {r[1] for r in rows} == {1, 2}
    assert close({r[0]: r[2] for r in rows}, points(uninterrupted, "grad_norm"))
