"""A checkpoint folder that churns while the agent snapshots it: files written
through a temp name and older ones deleted (keep the last two), as most
training scripts and Lightning's ``save_top_k`` do. A vanished file is
normal: the snapshot skips it and never raises."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from spotsweep.services.agent import uploads


def test_a_file_deleted_between_the_listing_and_its_link_is_skipped(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for n in (1, 2, 3):
        (ckpt / f"ckpt-{n}").write_text(str(n))
    real_link = os.link

    def link_after_delete(src: str | Path, dst: str | Path, **kwargs: int | bool) -> None:
        if Path(src).name == "ckpt-1":  # the snapshot links by name in the folder's descriptor (src_dir_fd)
            os.unlink(ckpt / "ckpt-1")  # the script deleted it just after the walk listed it
        real_link(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link_after_delete)
    staged = uploads.stage(ckpt)
    assert sorted(p.name for p in staged.iterdir()) == ["ckpt-2", "ckpt-3"]


def test_snapshots_of_a_folder_that_churns_never_raise(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            tmp = ckpt / f".tmp-{n}"
            tmp.write_bytes(b"x" * 4096)
            os.replace(tmp, ckpt / f"ckpt-{n}")
            (ckpt / "sub" / f"part-{n}").write_bytes(b"y")
            for old in (ckpt / f"ckpt-{n - 2}", ckpt / "sub" / f"part-{n - 2}"):
                old.unlink(missing_ok=True)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        for _ in range(300):
            staged = uploads.stage(ckpt)
            assert staged.is_dir()
            # Whatever it holds is whole: each file has the size it was written with.
            assert all(p.stat().st_size == 4096 for p in staged.glob("ckpt-*"))
    finally:
        stop.set()
        writer.join()


def test_a_folder_replaced_during_the_walk_is_snapshot_again_then_skipped(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A sub-folder that vanishes mid-walk fails the walk: ``stage`` takes the
    snapshot again (up to 3 times), and past that the caller skips the checkpoint."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "w.bin").write_text("w")
    real, calls = uploads.snapshot, []

    def flaky(directory: Path, into: Path, fails: int) -> Path:
        calls.append(directory)
        if len(calls) <= fails:
            raise FileNotFoundError(2, "No such file or directory", str(directory / "step-7"))
        return real(directory, into)

    monkeypatch.setattr(uploads, "snapshot", lambda d, i, *_: flaky(d, i, 2))
    assert sorted(p.name for p in uploads.stage(ckpt).iterdir()) == ["w.bin"] and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(uploads, "snapshot", lambda d, i, *_: flaky(d, i, 3))
    with pytest.raises(FileNotFoundError):
        uploads.stage(ckpt)
    assert len(calls) == 3
