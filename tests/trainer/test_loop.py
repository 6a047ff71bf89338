"""The training loop in-process: determinism, accumulation, exact resume, refusals, divergence, stopping."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from spotsweep.trainer import loop
from spotsweep.trainer.config import ResumeMismatch
from spotsweep.trainer.loop import Diverged, StopRequest
from spotsweep.trainer.precision import choose

DENSE = {"experts": 0}


def test_same_config_gives_identical_numbers_and_another_seed_does_not(tmp_path: Path, run_tiny) -> None:
    a, rec_a = run_tiny(tmp_path / "a", model={"dropout": 0.1})
    b, rec_b = run_tiny(tmp_path / "b", model={"dropout": 0.1})
    c, _ = run_tiny(tmp_path / "c", model={"dropout": 0.1}, seed=1)
    assert rec_a.values("loss") == rec_b.values("loss")
    assert a.metrics["val_loss"] == b.metrics["val_loss"]
    assert c.metrics["val_loss"] != a.metrics["val_loss"]


def test_loss_falls_and_every_metric_is_reported(tmp_path: Path, run_tiny) -> None:
    result, rec = run_tiny(tmp_path / "a", steps=30, eval_every=12, ckpt_every=10, lr=3e-3)
    assert result.outcome == "completed" and result.step == 30
    losses = [v for _, v in rec.values("loss")]
    assert [s for s, _ in rec.values("loss")] == list(range(1, 31))
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
    assert [s for s, _ in rec.values("val_loss")] == [12, 24, 30]  # every eval_every, and always at the last step
    assert {s for s, _ in rec.values("val_acc")} == {12, 24, 30}
    assert all(v > 0 for _, v in rec.values("tokens_per_s")) and len(rec.values("tokens_per_s")) == 30
    assert all(math.isfinite(v) and v > 0 for _, v in rec.values("aux_loss"))
    lrs = [v for _, v in rec.values("lr")]
    assert max(lrs) == pytest.approx(3e-3) and lrs[-1] == pytest.approx(3e-4)  # cosine to 10% of the peak
    assert [r["checkpoint"] for r in rec.lines if "checkpoint" in r] == [10, 20, 30]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["step-000000030.pt"]  # keep_last 1, no temp files


def test_grad_accum_trains_like_the_big_batch(tmp_path: Path, run_tiny) -> None:
    # dropout 0, fp32, same seed: the same 16 windows per step, whatever the split
    big, rec_big = run_tiny(tmp_path / "big", model=DENSE, batch_size=16, grad_accum=1)
    split2, rec_2 = run_tiny(tmp_path / "s2", model=DENSE, batch_size=8, grad_accum=2)
    split4, rec_4 = run_tiny(tmp_path / "s4", model=DENSE, batch_size=4, grad_accum=4)  # the OOM retry's halving, twice
    half, _ = run_tiny(tmp_path / "half", model=DENSE, batch_size=8, grad_accum=1)
    for rec in (rec_2, rec_4):
        assert [v for _, v in rec.values("loss")] == pytest.approx([v for _, v in rec_big.values("loss")], abs=1e-5)
    assert split2.metrics["val_loss"] == pytest.approx(big.metrics["val_loss"], abs=1e-5)
    assert split4.metrics["val_loss"] == pytest.approx(big.metrics["val_loss"], abs=1e-5)
    assert abs(half.metrics["val_loss"] - big.metrics["val_loss"]) > 1e-4  # a smaller effective batch is another run


def test_batch_32_with_accumulation_2_trains_like_batch_64(tmp_path: Path, run_tiny) -> None:
    # the issue's own case: dropout 0, fp32, same seed
    b64, rec_64 = run_tiny(tmp_path / "b64", model=DENSE, amp="fp32", steps=4, batch_size=64, grad_accum=1)
    b32x2, rec_32x2 = run_tiny(tmp_path / "b32x2", model=DENSE, amp="fp32", steps=4, batch_size=32, grad_accum=2)
    assert [s for s, _ in rec_32x2.values("loss")] == [1, 2, 3, 4]
    assert [v for _, v in rec_32x2.values("loss")] == pytest.approx([v for _, v in rec_64.values("loss")], abs=1e-5)
    assert b32x2.metrics["val_loss"] == pytest.approx(b64.metrics["val_loss"], abs=1e-5)


def test_resume_with_more_steps_equals_the_longer_run(tmp_path: Path, run_tiny) -> None:
    full, rec_full = run_tiny(tmp_path / "full", model={"dropout": 0.1}, steps=12, lr_horizon=12)
    first, _ = run_tiny(tmp_path / "grow", model={"dropout": 0.1}, steps=5, lr_horizon=12)
    assert first.step == 5
    # more steps, and other cadence and early-stop settings: all allowed on resume
    more, rec_more = run_tiny(tmp_path / "grow", model={"dropout": 0.1}, steps=12, lr_horizon=12, eval_every=3,
                              ckpt_every=7, patience=0, log_every=2)
    assert rec_more.lines[0] == {"step": 5, "resumed_from": 5}
    assert more.step == 12
    assert more.metrics["val_loss"] == pytest.approx(full.metrics["val_loss"], abs=1e-6)
    assert rec_more.values("loss")[-1][1] == pytest.approx(rec_full.values("loss")[-1][1], abs=1e-6)


def test_resume_refuses_a_changed_trajectory_setting(tmp_path: Path, run_tiny) -> None:
    ckpt = tmp_path / "a"
    run_tiny(ckpt, steps=4)
    with pytest.raises(ResumeMismatch, match=r"lr: 0.001 in the checkpoint, 0.003 now"):
        run_tiny(ckpt, steps=4, lr=3e-3)
    with pytest.raises(ResumeMismatch, match=r"model\.heads: 2 in the checkpoint, 4 now"):
        run_tiny(ckpt, steps=4, model={"heads": 4})
    with pytest.raises(ResumeMismatch, match="effective_batch"):
        run_tiny(ckpt, steps=4, batch_size=16)
    with pytest.raises(ResumeMismatch, match="optimizer"):
        run_tiny(ckpt, steps=4, optimizer="sgd")
    # The horizon defaults to --steps, so more steps without --lr-horizon would change the schedule.
    with pytest.raises(ResumeMismatch, match="pass --lr-horizon explicitly"):
        run_tiny(ckpt, steps=8)


def test_auto_precision_may_resolve_differently_on_resume(tmp_path: Path, run_tiny, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "a"
    run_tiny(ckpt, steps=4, lr_horizon=8)  # --amp auto on the CPU: fp32, whose disabled GradScaler saves {}
    written = torch.load(ckpt / "step-000000004.pt", map_location="cpu", weights_only=True)
    assert (written["precision"], written["scaler"], written["trajectory"]["amp"]) == ("fp32", {}, "auto")
    # The next node is a GPU without bf16, where auto means fp16 with an enabled GradScaler.
    monkeypatch.setattr(loop, "for_device", lambda device, amp: choose("cuda", amp, bf16_supported=False))
    resumed, rec = run_tiny(ckpt, steps=8, lr_horizon=8)
    assert rec.lines[0] == {"step": 4, "resumed_from": 4}
    assert resumed.outcome == "completed" and math.isfinite(resumed.metrics["val_loss"])
    note = capsys.readouterr().err
    assert "was written in fp32; --amp auto resolves to fp16 here" in note and "fresh GradScaler" in note
    last = torch.load(ckpt / "step-000000008.pt", map_location="cpu", weights_only=True)
    assert last["precision"] == "fp16" and last["scaler"]["scale"] > 0


def test_resume_may_split_the_batch_differently(tmp_path: Path, run_tiny) -> None:
    ref, _ = run_tiny(tmp_path / "ref", model=DENSE, steps=8, batch_size=8)
    run_tiny(tmp_path / "oom", model=DENSE, steps=4, lr_horizon=8, batch_size=8)
    resumed, rec = run_tiny(tmp_path / "oom", model=DENSE, steps=8, lr_horizon=8, batch_size=4, grad_accum=2)
    assert rec.lines[0] == {"step": 4, "resumed_from": 4}
    assert resumed.metrics["val_loss"] == pytest.approx(ref.metrics["val_loss"], abs=1e-5)


def test_a_finished_run_reports_its_result_again(tmp_path: Path, run_tiny) -> None:
    done, _ = run_tiny(tmp_path / "a", steps=4)
    again, rec = run_tiny(tmp_path / "a", steps=4)
    assert again.outcome == "completed" and rec.lines == [
        {"step": 4, "resumed_from": 4}, {"step": 4, **{k: done.metrics[k] for k in ("val_loss", "val_acc")}}]


def test_nan_loss_ends_the_run_as_diverged(tmp_path: Path, run_tiny) -> None:
    with pytest.raises(Diverged, match="diverged: the loss is (nan|inf)"):
        run_tiny(tmp_path / "a", optimizer="sgd", lr=1e6, grad_clip=0, steps=30, ckpt_every=1)
    # no checkpoint of the broken state: the last one is from before
    assert not (tmp_path / "a").exists() or all(
        int(p.stem.split("-")[1]) < 30 for p in (tmp_path / "a").glob("step-*.pt"))


def test_sigterm_checkpoints_at_the_step_boundary(tmp_path: Path, run_tiny) -> None:
    result, rec = run_tiny(tmp_path / "a", stop=StopRequest(requested=True))
    assert result.outcome == "preempted" and result.step == 1
    assert rec.lines[-1] == {"checkpoint": 1}
    resumed, rec2 = run_tiny(tmp_path / "a")
    assert rec2.lines[0] == {"step": 1, "resumed_from": 1} and resumed.step == 8


def test_patience_stops_and_a_stopped_run_stays_stopped(tmp_path: Path, run_tiny) -> None:
    # min_delta 10: nothing counts as an improvement after the first evaluation
    result, rec = run_tiny(tmp_path / "a", eval_every=1, patience=2, min_delta=10.0, steps=20)
    assert result.outcome == "stopped" and result.step == 3, result
    assert "patience 2" in result.message
    assert rec.lines[-1] == {"checkpoint": 3} and rec.values("val_loss")[-1][0] == 3
    again, _ = run_tiny(tmp_path / "a", eval_every=1, patience=2, min_delta=10.0, steps=20)
    assert again.outcome == "stopped" and again.step == 3


def test_threshold_and_time_budget_stop_the_run(tmp_path: Path, run_tiny) -> None:
    from spotsweep.trainer.config import Threshold

    result, _ = run_tiny(tmp_path / "a", eval_every=2, steps=20, thresholds=(Threshold.parse("val_acc<0.99@3"),))
    assert result.outcome == "stopped" and result.step == 4  # the first evaluation at or after step 3
    kept, _ = run_tiny(tmp_path / "b", eval_every=2, steps=6, thresholds=(Threshold.parse("val_loss>100@1"),))
    assert kept.outcome == "completed"
    timed, rec = run_tiny(tmp_path / "c", steps=20, time_budget=1e-9)
    assert timed.outcome == "stopped" and timed.step == 1 and "wall-time budget" in timed.message
    assert rec.values("val_loss")[-1][0] == 1  # the stop step still gets its validation loss


def test_fp16_with_a_grad_scaler_and_gradient_checkpointing(tmp_path: Path, run_tiny) -> None:
    fp16, rec = run_tiny(tmp_path / "a", amp="fp16")
    assert math.isfinite(fp16.metrics["val_loss"]) and rec.values("loss")[-1][1] < rec.values("loss")[0][1]
    plain, _ = run_tiny(tmp_path / "b", model={"dropout": 0.1})
    recomputed, _ = run_tiny(tmp_path / "c", model={"dropout": 0.1}, grad_checkpointing=True)
    # same numbers: the recomputation replays the dropout masks
    assert recomputed.metrics["val_loss"] == pytest.approx(plain.metrics["val_loss"], abs=1e-6)
