"""``examples/mlp/train.py`` under the trial contract: it learns, checkpoints, resumes exactly, fails on cue.

The script runs as a subprocess with the environment an agent would set, and
the tests read the metrics file the way an agent does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "mlp" / "train.py"


class Trial:
    """One trial's directories and environment, reused across its attempts."""

    def __init__(self, root: Path, params: dict[str, object] | None = None) -> None:
        self.root = root
        self.metrics = root / "metrics.jsonl"
        self.ckpt = root / "checkpoint"
        self.ckpt.mkdir(parents=True)
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.params = params or {}

    def env(self, attempt: int = 1, resume_step: int | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
        env.update(
            SPOTSWEEP_PARAMS=json.dumps(self.params),
            SPOTSWEEP_SWEEP_ID="sweep",
            SPOTSWEEP_TRIAL_ID=self.root.name,
            SPOTSWEEP_TRIAL_NAME=self.root.name,
            SPOTSWEEP_ATTEMPT=str(attempt),
            SPOTSWEEP_METRICS=str(self.metrics),
            SPOTSWEEP_CHECKPOINT_DIR=str(self.ckpt),
        )
        if resume_step is not None:
            env["SPOTSWEEP_RESUME_STEP"] = str(resume_step)
        return env

    def start(self, *args: str, attempt: int = 1, resume_step: int | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(TRAIN), *args],
            cwd=self.workdir,
            env=self.env(attempt, resume_step),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, attempt: int = 1, resume_step: int | None = None) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args, attempt=attempt, resume_step=resume_step)
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def lines(self) -> list[dict[str, float]]:
        if not self.metrics.exists():
            return []
        # Only whole lines: the script may be mid-write, as it is when an agent tails the file.
        return [json.loads(line) for line in self.metrics.read_text().split("\n")[:-1]]

    def last(self, name: str) -> float:
        """The trial's final value of a metric: its last reported value."""
        return [r[name] for r in self.lines() if name in r][-1]


def test_learns_and_checkpoints(tmp_path: Path) -> None:
    t = Trial(tmp_path / "a")
    proc = t.run("--steps", "60", "--ckpt-every", "20", "--eval-every", "10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # managed: lines go to the file, not stdout

    lines = t.lines()
    val = [r["val_loss"] for r in lines if "val_loss" in r]
    assert [r["step"] for r in lines if "val_loss" in r] == [10, 20, 30, 40, 50, 60]
    assert val[-1] < 0.8 * val[0], val
    assert t.last("val_acc") > 0.6
    losses = [r["loss"] for r in lines if "loss" in r]
    assert sum(losses[-10:]) < 0.8 * sum(losses[:10])
    # Linear warmup to the peak (6 steps = 10% of 60), then cosine down to 10% of it.
    lrs = [r["lr"] for r in lines if "lr" in r]
    assert lrs[0] == pytest.approx(3e-3 / 6) and max(lrs) == pytest.approx(3e-3)
    assert lrs[-1] == pytest.approx(3e-4)
    assert [r["checkpoint"] for r in lines if "checkpoint" in r] == [20, 40, 60]
    assert [p.name for p in t.ckpt.iterdir()] == ["checkpoint.pt"]  # no temp file left behind


def test_sigterm_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    args = ("--steps", "40", "--ckpt-every", "100", "--eval-every", "10", "--dropout", "0.1")
    a = Trial(tmp_path / "a")
    assert a.run(*args).returncode == 0

    b = Trial(tmp_path / "b")
    proc = b.start(*args, "--sleep", "0.05")
    deadline = time.monotonic() + 60
    while not any(r.get("step", 0) >= 10 for r in b.lines()):
        assert proc.poll() is None and time.monotonic() < deadline, "run B never reached step 10"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err

    saved = [r["checkpoint"] for r in b.lines() if "checkpoint" in r]
    assert len(saved) == 1 and 10 <= saved[0] < 40, saved
    assert max(r.get("step", 0) for r in b.lines()) == saved[0]  # stopped at the step it saved
    assert (b.ckpt / "checkpoint.pt").is_file()

    resumed = b.run(*args, attempt=2, resume_step=saved[0])
    assert resumed.returncode == 0, resumed.stderr
    assert {"step": saved[0], "resumed_from": saved[0]} in b.lines()
    assert b.last("val_loss") == pytest.approx(a.last("val_loss"), abs=1e-6)
    assert b.last("loss") == pytest.approx(a.last("loss"), abs=1e-6)


def test_fail_at_step_fails_attempt_one_only(tmp_path: Path) -> None:
    t = Trial(tmp_path / "a")
    first = t.run("--steps", "20", "--fail-at-step", "5")
    assert first.returncode == 1
    assert "injected failure at step 5" in first.stderr
    assert max(r["step"] for r in t.lines()) == 4

    retry = t.run("--steps", "20", "--fail-at-step", "5", attempt=2)
    assert retry.returncode == 0, retry.stderr
    assert t.last("step") == 20


def test_refuses_checkpoint_from_other_flags(tmp_path: Path) -> None:
    t = Trial(tmp_path / "a")
    assert t.run("--steps", "20", "--ckpt-every", "10").returncode == 0
    other = t.run("--steps", "20", "--hidden", "32")
    assert other.returncode != 0
    # The differing key comes first: a sweep shows a trial's error cut to its first few hundred characters.
    assert other.stderr.startswith("refusing to mix runs: the checkpoint was written with other flags (hidden: 64 in the "
                                   "checkpoint, 32 now)")
    longer = t.run("--steps", "40")  # the lr horizon defaulted to --steps: the schedule would move
    assert longer.returncode != 0
    assert "lr_horizon: 20 in the checkpoint, 40 now" in longer.stderr
    assert "--lr-horizon defaults to --steps: give it (the largest --steps) to resume with more --steps" in longer.stderr


def test_resumes_to_a_larger_budget_as_asha_promotes_it(tmp_path: Path) -> None:
    """With --lr-horizon fixed, 20 steps then 60 from the checkpoint end where 60 in one go do."""
    args = ("--lr-horizon", "60", "--ckpt-every", "20", "--eval-every", "10")
    straight = Trial(tmp_path / "a")
    assert straight.run("--steps", "60", *args).returncode == 0
    promoted = Trial(tmp_path / "b")
    assert promoted.run("--steps", "20", *args).returncode == 0
    again = promoted.run("--steps", "60", *args, attempt=2, resume_step=20)
    assert again.returncode == 0, again.stderr
    assert promoted.last("val_loss") == pytest.approx(straight.last("val_loss"), abs=1e-6)
