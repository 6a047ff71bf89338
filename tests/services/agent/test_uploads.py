"""The checkpoint snapshot: what is uploaded is what the checkpoint line named."""

from pathlib import Path

from spotsweep.services.agent.uploads import snapshot


def test_snapshot_is_not_changed_by_a_newer_checkpoint_renamed_into_place(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.pt").write_text("step 10")
    (ckpt / "sub" / "opt.pt").write_text("step 10")
    staged = snapshot(ckpt, tmp_path / "staged")
    # the script writes step 20 the contract's way: temp file, then rename
    (ckpt / "model.tmp").write_text("step 20")
    (ckpt / "model.tmp").replace(ckpt / "model.pt")
    assert (staged / "model.pt").read_text() == "step 10"
    assert (staged / "sub" / "opt.pt").read_text() == "step 10"
    assert (ckpt / "model.pt").read_text() == "step 20"
