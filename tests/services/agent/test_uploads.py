"""The checkpoint snapshot: what is uploaded is what the checkpoint line named."""

import os
import shutil
from pathlib import Path

import pytest

from spotsweep.services.agent.uploads import snapshot
from spotsweep.shared.artifacts.safe_files import refusal
from spotsweep.shared.errors import Refused


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


def test_a_hard_link_to_a_file_the_trial_does_not_own_is_not_staged_and_the_rest_is(tmp_path: Path) -> None:
    """A trial running as root linked /etc/shadow into its checkpoint; it must not reach the bucket."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret")
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    (ckpt / "model.pt").write_text("weights")
    os.link(secret, ckpt / "shadow")
    as_user = tmp_path / "as-user"  # the trial runs as uid 4242 (--trial-user): root's file linked there
    as_user.mkdir()
    (as_user / "model.pt").write_text("weights")
    os.link(secret, as_user / "shadow")
    os.chown(as_user, 4242, 4242)
    os.chown(as_user / "model.pt", 4242, 4242)
    for directory in (ckpt, as_user):
        staged = snapshot(directory, tmp_path / f"staged-{directory.name}")
        assert sorted(p.name for p in staged.iterdir()) == ["model.pt"], directory


def test_the_hard_link_rules() -> None:
    def st(uid: int, nlink: int) -> os.stat_result:
        return os.stat_result((0o100644, 1, 1, nlink, uid, 0, 0, 0, 0, 0))

    # a trial as uid 1000 (the agent's own user, or --trial-user 1000)
    assert refusal(st(1000, 1), None, 1000) is None
    assert refusal(st(1000, 2), None, 1000) is None  # its own file, linked twice: its to hand over
    assert "uid 0's, not the trial's" in (refusal(st(0, 2), None, 1000) or "")
    assert "not the trial's user" in (refusal(st(0, 1), 1000, 1000) or "")  # --trial-user: only its own files
    # a trial as root owns every file: any hard link may be anything
    assert refusal(st(0, 1), None, 0) is None
    assert "a trial running as root may link any file" in (refusal(st(0, 2), None, 0) or "")


def test_a_checkpoint_with_more_files_than_limits_checkpoint_files_is_refused_naming_the_field(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    for i in range(5):
        (ckpt / f"shard-{i}").write_text("x")
    assert len(list(snapshot(ckpt, tmp_path / "ok", max_files=5).iterdir())) == 5
    shutil.rmtree(tmp_path / "ok")  # its links would make every file a hard link (the agent removes its stage too)
    with pytest.raises(Refused, match=r"holds more than 3 files \(limits.checkpoint_files = 3\): not uploaded"):
        snapshot(ckpt, tmp_path / "staged", max_files=3)
    assert not (tmp_path / "staged").exists()
