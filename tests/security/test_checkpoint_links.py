"""Checkpoint snapshots never follow a link (issue 19 section 1).

A trial that links ``/etc/passwd``, the agent's credentials file or another
folder into its checkpoint directory must not get the target's content into
the shared bucket: links, FIFOs and sockets are skipped with a warning that
names them, and a symlinked directory is not descended into. With
``--trial-user`` (the agent is root, the directory belongs to the trial's
user), a file the trial's user does not own (a hard link to a root-only
file) is skipped too.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from spotsweep.services.agent import uploads
from spotsweep.shared.artifacts.checkpoints import read_manifest, upload_checkpoint_files
from spotsweep.shared.artifacts.checkpoint_layout import checkpoint_prefix
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.artifacts.safe_files import Walk, regular_files


def _hostile_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "agent.env"
    secret.write_text("SPOTSWEEP_AMQP_URL=amqp://agent:s3cr3t@broker/\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "other.pt").write_text("another trial's")
    ckpt = tmp_path / "checkpoint"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.pt").write_text("weights")
    (ckpt / "sub" / "opt.pt").write_text("state")
    (ckpt / "passwd").symlink_to("/etc/passwd")
    (ckpt / "agent.env").symlink_to(secret)
    (ckpt / "sub" / "dir-link").symlink_to(elsewhere, target_is_directory=True)
    os.mkfifo(ckpt / "fifo")
    return ckpt, secret


def test_the_walk_yields_regular_files_only_and_names_what_it_skipped(tmp_path: Path) -> None:
    ckpt, _ = _hostile_checkpoint(tmp_path)
    walk = Walk()
    assert [e.rel for e in regular_files(ckpt, walk)] == ["model.pt", "sub/opt.pt"]
    assert sorted(rel for rel, _ in walk.skipped) == ["agent.env", "fifo", "passwd", "sub/dir-link"]
    assert "symbolic link" in walk.summary()


def test_a_snapshot_and_its_upload_hold_no_link_target(tmp_path: Path) -> None:
    ckpt, _ = _hostile_checkpoint(tmp_path)
    staged = uploads.stage(ckpt)
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*")) == ["model.pt", "sub", "sub/opt.pt"]
    store = LocalArtifactStore(tmp_path / "store")
    folder = upload_checkpoint_files(store, "s-00000000", "t1", 3, ckpt)  # straight from the trial's folder too
    sizes, _ = read_manifest(store, checkpoint_prefix("s-00000000", "t1"), folder)
    assert sorted(sizes) == ["model.pt", "sub/opt.pt"]
    keys = store.list(checkpoint_prefix("s-00000000", "t1"))
    assert not any("passwd" in k or "agent.env" in k or "other.pt" in k for k in keys), keys


def test_a_checkpoint_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "x").write_text("x")
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    with pytest.raises(OSError):
        list(regular_files(tmp_path / "link", Walk()))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the agent runs trials as another user only as root (CI is root)")
def test_with_a_trial_user_files_it_does_not_own_are_skipped(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    root_only = tmp_path / "root-only"
    root_only.write_text("root's secret")
    root_only.chmod(0o600)
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    (ckpt / "model.pt").write_text("weights")
    os.chown(ckpt / "model.pt", nobody, -1)
    os.link(root_only, ckpt / "hardlink")  # what protected_hardlinks forbids the trial; root-owned here
    os.chown(ckpt, nobody, -1)
    staged = uploads.stage(ckpt)
    assert sorted(p.name for p in staged.iterdir()) == ["model.pt"]
