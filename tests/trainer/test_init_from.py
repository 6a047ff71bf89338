"""``spotsweep train tinylm --init-from PATH``: fine-tuning from a checkpoint folder's weights (issue 40).

The weights are a real pretraining run's (the ``pretrained`` fixture: 300 steps of the tiny model), in a
read-only folder as a staged input is; the trial process links it into its working directory as ``weights``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from spotsweep.trainer import cli, fit
from spotsweep.trainer.checkpoint import CheckpointDir
from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.models import tinylm_task
from spotsweep.trainer.pretrained import ArchitectureMismatch
from spotsweep.trainer.schedule import lr_at


def _saved(folder: Path) -> dict[str, Any]:
    state = CheckpointDir(folder).load_latest()
    assert state is not None
    return state


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_init_from_loads_exactly_the_saved_weights_at_step_0_with_a_fresh_optimizer(tmp_path: Path, data_dir: Path,
                                                                                     pretrained, recorder) -> None:
    args = cli.parser().parse_args([*pretrained.arch, "--data-dir", str(data_dir), "--batch-size", "8", "--steps", "20",
                                    "--eval-every", "10", "--dropout", "0.1", "--init-from", str(pretrained.folder)])
    train, model = cli.configs(args)
    at_first_step: list[dict[str, torch.Tensor]] = []

    def build() -> Any:  # the model as the first training step sees it
        task = tinylm_task.build(model, train, None, data_dir, 16)
        task.model.register_forward_pre_hook(
            lambda m, _: at_first_step.append({k: v.clone() for k, v in m.state_dict().items()}) if not at_first_step else None)
        return task

    before = _listing(pretrained.folder)
    rec = recorder()
    result = fit(train, build, reporter=rec, checkpoint_dir=tmp_path / "ckpt", init_from=args.init_from)
    assert result.outcome == "completed" and result.step == 20
    weights = _saved(pretrained.folder)["model"]
    assert at_first_step[0].keys() == weights.keys()
    assert all(torch.equal(at_first_step[0][k], weights[k]) for k in weights)
    assert [s for s, _ in rec.values("loss")][:2] == [1, 2] and not rec.values("resumed_from")  # step 0, not 300
    assert rec.values("lr")[0] == (1, lr_at(1, train.lr, train.warmup_steps, train.horizon, train.min_lr_ratio))
    own = _saved(tmp_path / "ckpt")
    assert own["step"] == 20 and own["trajectory"]["model.dropout"] == 0.1
    assert {int(s["step"]) for s in own["optimizer"]["state"].values()} == {20}  # fresh: not 300 + 20
    assert _listing(pretrained.folder) == before  # the staged weights were only read


def test_the_first_evaluation_beats_a_from_scratch_run_at_the_same_step(tmp_path: Path, run_flags, pretrained) -> None:
    flags = (*pretrained.arch, "--steps", "10", "--eval-every", "10", "--dropout", "0.1")
    scratch, _ = run_flags(tmp_path / "scratch", *flags)
    tuned, _ = run_flags(tmp_path / "tuned", *flags, "--init-from", str(pretrained.folder))
    assert tuned.metrics["val_loss"] < scratch.metrics["val_loss"] - 1.0, (tuned.metrics, scratch.metrics)


@pytest.mark.parametrize("flag, value, field", [
    ("--layers", "2", "layers"), ("--heads", "4", "heads"), ("--experts", "4", "experts"), ("--top-k", "2", "top_k"),
    ("--shared-experts", "0", "shared_experts"), ("--dense-layers", "0", "dense_layers"),
    ("--expert-hidden", "16", "expert_hidden"),
])
def test_another_architecture_is_refused_naming_the_field(tmp_path: Path, run_flags, pretrained, flag: str, value: str,
                                                          field: str) -> None:
    with pytest.raises(ArchitectureMismatch) as e:
        run_flags(tmp_path / "ckpt", *pretrained.arch, flag, value, "--init-from", str(pretrained.folder))
    assert f"({field}: " in str(e.value) and f"in the checkpoint, {value} in this run" in str(e.value)
    assert not (tmp_path / "ckpt").exists()


def test_a_different_dropout_aux_loss_weight_and_seq_len_are_accepted(tmp_path: Path, run_flags, pretrained) -> None:
    """A fine-tuning sweep varies --dropout over pretrained weights: regularisation is not architecture."""
    result, _ = run_flags(tmp_path / "ckpt", *pretrained.arch, "--dropout", "0.3", "--aux-loss-weight", "0.05",
                          "--seq-len", "16", "--steps", "2", "--eval-every", "2", "--init-from", str(pretrained.folder))
    assert result.outcome == "completed"


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_folder_without_a_checkpoint_is_refused_naming_the_flag_and_path(tmp_path: Path, run_flags, pretrained,
                                                                          make: str) -> None:
    folder = tmp_path / "weights"
    if make == "empty":
        folder.mkdir()
    with pytest.raises(SetupError, match=f"^--init-from: .*{str(folder)!r}"):
        run_flags(tmp_path / "ckpt", *pretrained.arch, "--init-from", str(folder))


def test_the_cli_refuses_another_architecture_with_exit_2_and_one_line(trial_process, pretrained) -> None:
    t = trial_process("mismatch")
    (t.workdir / "weights").symlink_to(pretrained.folder)
    done = t.run(*pretrained.arch, "--dim", "64", "--heads", "4", "--init-from", "weights")  # both differ: dim is first
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --init-from: refusing weights/step-000000300.pt: it is another architecture (dim: 32 in the checkpoint, "
        "64 in this run); the flags that shape the model must be the checkpoint's (dropout and the aux-loss weight may "
        "differ)")
    missing = t.run(*pretrained.arch, "--init-from", "no-such-weights")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].startswith("error: --init-from: no such folder: 'no-such-weights'")


def test_a_preempted_fine_tuning_run_resumes_from_its_own_checkpoint_not_the_init(tmp_path: Path, trial_process,
                                                                                   run_flags, pretrained) -> None:
    """``spotsweep train tinylm ... --init-from weights`` (a staged input, relative, read-only) as an agent runs it:
    SIGTERM after a checkpoint, then the next attempt continues its own run and ends as an uninterrupted one."""
    flags = (*pretrained.arch, "--steps", "120", "--eval-every", "40", "--ckpt-every", "1000", "--dropout", "0.1")
    reference, _ = run_flags(tmp_path / "reference", *flags, "--init-from", str(pretrained.folder))

    t = trial_process("preempted")
    (t.workdir / "weights").symlink_to(pretrained.folder)
    before = _listing(pretrained.folder)
    proc = t.start(*flags, "--init-from", "weights")
    deadline = time.monotonic() + 120
    while not any(r.get("step", 0) >= 3 for r in t.lines()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "note: initialised from the weights of weights/step-000000300.pt" in err
    saved = [r["checkpoint"] for r in t.lines() if "checkpoint" in r]
    assert len(saved) == 1 and 3 <= saved[0] < 120, saved

    resumed = t.run(*flags, "--init-from", "weights", attempt=2)
    assert resumed.returncode == 0, resumed.stderr
    assert "initialised from" not in resumed.stderr
    assert {"step": saved[0], "resumed_from": saved[0]} in t.lines()
    assert t.lines()[-1] == {"checkpoint": 120}
    assert t.last("val_loss") == pytest.approx(reference.metrics["val_loss"], abs=1e-6)
    assert _listing(pretrained.folder) == before
