"""``spotsweep train tinylm`` as an agent runs it: SIGTERM and exact resume, exit codes, the last stderr line.

Divergence through a real trial process is in test_example_sweep.py, where
the agent records it as the trial's error.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from spotsweep.trainer import cli
from spotsweep.trainer.config import EarlyStopConfig, TrainConfig
from spotsweep.trainer.models.tinylm_task import fingerprint


def test_sigterm_mid_run_then_resume_ends_like_an_uninterrupted_run(tmp_path: Path, trial_process, run_flags) -> None:
    flags = ("--steps", "120", "--eval-every", "40", "--ckpt-every", "1000", "--dropout", "0.1")
    reference, ref_lines = run_flags(tmp_path / "reference", *flags)

    t = trial_process("preempted")
    # DataLoader workers on this attempt (none on the next): the agent's SIGTERM reaches them too
    proc = t.start(*flags, "--num-workers", "1")
    deadline = time.monotonic() + 120
    while not any(r.get("step", 0) >= 3 for r in t.lines()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as the agent does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "SIGTERM: checkpointed step" in err.strip().splitlines()[-1]
    saved = [r["checkpoint"] for r in t.lines() if "checkpoint" in r]
    assert len(saved) == 1 and 3 <= saved[0] < 120, saved  # --ckpt-every 1000: this one is the SIGTERM's
    assert max(r.get("step", 0) for r in t.lines()) == saved[0]  # stopped at the step it saved
    assert [p.name for p in t.ckpt.iterdir()] == [f"step-{saved[0]:09d}.pt"]

    resumed = t.run(*flags, attempt=2)
    assert resumed.returncode == 0, resumed.stderr
    resumed_line = {"step": saved[0], "resumed_from": saved[0]}
    assert resumed_line in t.lines()
    assert [type(r["resumed_from"]) for r in t.lines() if "resumed_from" in r] == [int]  # 10, not 10.0
    assert t.lines()[-2]["step"] == 120 and "val_loss" in t.lines()[-2] and t.lines()[-1] == {"checkpoint": 120}
    assert t.last("val_loss") == pytest.approx(reference.metrics["val_loss"], abs=1e-6)
    assert t.last("loss") == pytest.approx(ref_lines.values("loss")[-1][1], abs=1e-6)
    assert resumed.stderr.strip().splitlines()[-1].startswith("completed 120 steps: val_loss")


def test_a_rerun_of_a_finished_run_says_it_had_finished(trial_process) -> None:
    """Its last line says what happened, never a bare ``: val_loss ...`` (issue 31)."""
    t = trial_process("finished")
    flags = ("--steps", "2", "--eval-every", "2")
    assert t.run(*flags).returncode == 0
    again = t.run(*flags, attempt=2)
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip().splitlines()[-1].startswith("already completed 2 steps (its checkpoint); nothing to "
                                                             "train: val_loss "), again.stderr


def test_a_refused_resume_reads_the_same_from_any_run_folder(trial_process) -> None:
    """Two attempts refused for the same reason give the same last line, so the planner's deterministic-failure
    rule sees one error (issue 40): the checkpoint is named by its file, not the attempt's own folder."""
    last_lines = []
    for name in ("p4121-t_3f9a_a1-0", "p4188-t_3f9a_a2-1"):
        t = trial_process(name)
        assert t.run("--steps", "2", "--eval-every", "2").returncode == 0
        refused = t.run("--steps", "2", "--eval-every", "2", "--lr", "0.003", attempt=2)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        last_lines.append(refused.stderr.strip().splitlines()[-1])
    assert last_lines[0] == last_lines[1], last_lines
    assert last_lines[0].startswith("error: refusing to resume step-000000002.pt (the run's checkpoint): it was written "
                                    "with other training settings (lr: 0.001 in the checkpoint, 0.003 now)")


def test_data_flag_trains_on_the_given_text_file(tmp_path: Path, run_flags) -> None:
    text = tmp_path / "verse.txt"
    line = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer.\n"
    text.write_text(line * (20_000 // len(line) + 1))
    unused = tmp_path / "data"  # where the built-in corpus would be built
    result, rec = run_flags(tmp_path / "ckpt", "--data", str(text), "--data-dir", str(unused), "--steps", "3",
                            "--eval-every", "3")
    assert result.outcome == "completed" and result.step == 3
    assert [s for s, _ in rec.values("loss")] == [1, 2, 3] and all(math.isfinite(v) for _, v in rec.values("loss"))
    assert math.isfinite(result.metrics["val_loss"])
    state = torch.load(tmp_path / "ckpt" / "step-000000003.pt", map_location="cpu", weights_only=True)
    assert state["trajectory"]["data"] == fingerprint(text) and state["trajectory"]["data"].startswith("verse.txt:")
    assert not unused.exists()  # the built-in corpus was never needed


def test_flag_defaults_and_choices_come_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    train, _ = cli.configs(cli.parser().parse_args([]))
    assert train == TrainConfig()
    optimizer = next(a for a in cli.parser()._actions if a.dest == "optimizer")
    assert optimizer.choices == ("adam", "adamw", "sgd") and optimizer.default == "adamw"
    monkeypatch.setattr(TrainConfig.model_fields["lr"], "default", 0.02)
    args = cli.parser().parse_args([])
    assert args.lr == 0.02 and "peak learning rate (default 0.02)" in cli.parser().format_help()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lr", "-1"], "error: --lr: Input should be greater than 0 (got -1.0)"),
        (["--batch-size", "0"], "error: --batch-size: Input should be greater than or equal to 1 (got 0)"),
        (["--patience", "-2"], "error: --patience: Input should be greater than or equal to 0 (got -2)"),
        (["--time-budget", "0"], "error: --time-budget: Input should be greater than 0 (got 0.0)"),
        (["--heads", "5"], "error: dim must be a multiple of heads (got dim=96, heads=5)"),
        (["--data", "/nonexistent/corpus.txt"], "error: --data: no such file: '/nonexistent/corpus.txt'"),
        (["--device", "tpu9"], "error: --device"),
    ],
)
def test_bad_flag_values_name_the_flag_and_value(flags: list[str], message: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["tinylm", "--data-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err.strip().splitlines()[-1], err


def test_argparse_errors_and_unknown_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["tinylm", "--steps", "many"])
    assert e.value.code == 2 and "argument --steps: invalid int value: 'many'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["tinylm", "--stop-if", "val_acc<0.3"])
    assert "argument --stop-if: expected METRIC<VALUE@STEP" in capsys.readouterr().err
    assert cli.main(["gpt5"]) == 2 and "unknown model 'gpt5' (available: tinylm)" in capsys.readouterr().err


def test_cuda_oom_ends_with_torchs_message_on_one_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity\n"
                                     "of 79.15 GiB of which 3.19 MiB is free.")

    monkeypatch.setattr(cli, "fit", out_of_memory)  # no GPU here: the point is the CLI's translation
    assert cli.main(["tinylm", "--data-dir", str(tmp_path)]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.19 MiB is free."


def test_without_torch_train_says_how_to_install_it(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    proc = subprocess.run([sys.executable, "-m", "spotsweep", "train", "tinylm"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "spotsweep train needs torch: pip install 'spotsweep[worker]'"
    # the rest of the CLI never needed it
    assert subprocess.run([sys.executable, "-m", "spotsweep", "--version"], env=env, capture_output=True,
                          timeout=60).returncode == 0


def test_every_config_setting_is_a_flag_made_from_its_field() -> None:
    """A new TrainConfig field is a flag once it has a description: no hand-written copy to forget."""
    flags = {opt for a in cli.parser()._actions for opt in a.option_strings}
    made = {cli.flag(path, field) for path, field in cli.knobs()}
    assert made <= flags
    paths = {path for path, _ in cli.knobs()}
    assert {(name,) for name in TrainConfig.model_fields} - paths == {("betas",), ("early_stop",)}
    assert {path[1] for path in paths if path[0] == "early_stop"} == set(EarlyStopConfig.model_fields)
    args = cli.parser().parse_args(["--min-delta", "0.5", "--stop-if", "val_acc<0.3@200", "--compile", "--warmup", "5"])
    train, _ = cli.configs(args)
    assert (train.early_stop.min_delta, str(train.early_stop.thresholds[0]), train.compile, train.warmup) == (
        0.5, "val_acc<0.3@200", True, 5)


def test_a_bad_early_stopping_value_names_its_own_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tinylm", "--data-dir", str(tmp_path), "--min-delta", "-1"]) == 2
    assert capsys.readouterr().err.strip().endswith("--min-delta: Input should be greater than or equal to 0 (got -1.0)")
