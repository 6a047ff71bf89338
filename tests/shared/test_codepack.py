"""The workdir packer: what goes in (ignores), the same bytes for the same tree, the size limit."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from spotsweep.shared import codepack
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import PermanentError


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def packed(root: Path) -> tuple[str, bytes]:
    out = io.BytesIO()
    sha = codepack.pack(root, codepack.select(root), out)
    return sha, out.getvalue()


def names(root: Path) -> list[str]:
    return [e.path for e in codepack.select(root)]


def test_same_tree_same_bytes_whatever_the_times_modes_and_place(tmp_path: Path) -> None:
    files = {"train.py": "print('hi')\n", "lib/util.py": "X = 1\n", "lib/data/a.txt": "a", "run.sh": "#!/bin/sh\n"}
    a = tree(tmp_path / "a", files)
    b = tree(tmp_path / "elsewhere" / "b", dict(reversed(files.items())))  # made in another order, at another place
    (a / "run.sh").chmod(0o755)
    (b / "run.sh").chmod(0o700)  # only the owner's execute bit counts
    os.utime(b / "train.py", (1, 1))
    sha_a, bytes_a = packed(a)
    sha_b, bytes_b = packed(b)
    assert sha_a == sha_b and bytes_a == bytes_b
    assert packed(a) == (sha_a, bytes_a)  # and again
    (b / "train.py").write_text("print('changed')\n")
    assert packed(b)[0] != sha_a


def test_archive_holds_sorted_entries_with_fixed_owners_and_times(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", {"b.py": "b", "a/z.txt": "z", "a/y.txt": "y", "run.sh": "x"})
    (root / "run.sh").chmod(0o755)
    _, data = packed(root)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["a", "a/y.txt", "a/z.txt", "b.py", "run.sh"]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        modes = {m.name: m.mode for m in members}
        assert modes["run.sh"] == 0o755 and modes["b.py"] == 0o644 and modes["a"] == 0o755
        assert tar.extractfile("a/z.txt").read() == b"z"  # type: ignore[union-attr]


def test_gitignore_and_spotsweepignore_are_honoured(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", {
        ".gitignore": "*.bin\n/data/\n!keep.bin\n",
        ".spotsweepignore": "runs/\n!wanted.bin\n",
        "train.py": "t", "big.bin": "x", "keep.bin": "k", "wanted.bin": "w",
        "data/set.csv": "1", "sub/data/inner.csv": "2",  # /data/ is anchored: sub/data stays
        "runs/old/log.txt": "l", "sub/runs/x.txt": "r",  # runs/ is not: both go
        "sub/.gitignore": "local.txt\n", "sub/local.txt": "l", "local.txt": "top",  # a nested file applies below it
        ".git/config": "[core]", "sub/.git": "gitdir: elsewhere",
    })
    assert names(root) == [".gitignore", ".spotsweepignore", "keep.bin", "local.txt", "sub", "sub/.gitignore",
                           "sub/data", "sub/data/inner.csv", "train.py", "wanted.bin"]


def test_links_inside_are_kept_as_links_and_outside_ones_refused(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", {"lib/real.py": "r"})
    (root / "alias.py").symlink_to("lib/real.py")
    _, data = packed(root)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        link = tar.getmember("alias.py")
        assert link.issym() and link.linkname == "lib/real.py"
    (root / "lib" / "escape").symlink_to("../../outside.txt")
    with pytest.raises(PermanentError, match=r"'lib/escape' -> '../../outside.txt' points outside the workdir"):
        codepack.select(root)
    (root / "lib" / "escape").unlink()
    (root / "abs").symlink_to("/etc/hostname")
    with pytest.raises(PermanentError, match="'abs' -> '/etc/hostname' points outside"):
        codepack.select(root)


def test_size_limit_names_the_size_the_limit_and_the_biggest_files(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", {"train.py": "t" * 10, "data/big.bin": b"\0" * 3 * codepack.MiB,
                                 "data/mid.bin": b"\0" * codepack.MiB})
    entries = codepack.select(root)
    assert codepack.check_size(entries, 5 * codepack.MiB) == 4 * codepack.MiB + 10
    with pytest.raises(PermanentError) as e:
        codepack.check_size(entries, 2 * codepack.MiB)
    text = str(e.value)
    assert "4.0 MiB, over the limit of 2.0 MiB" in text and "SPOTSWEEP_WORKDIR_LIMIT_MIB" in text
    assert "the biggest: data/big.bin (3.0 MiB), data/mid.bin (1.0 MiB), train.py (0.0 MiB)" in text


def test_publish_uploads_once_per_content(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    root = tree(tmp_path / "w", {"train.py": "print(1)\n"})
    first = codepack.publish(store, root, codepack.MiB)
    assert first.uploaded and first.key == f"code/{first.sha256}.tar.gz" and first.files == 1
    again = codepack.publish(store, root, codepack.MiB)
    assert again == first.__class__(**{**first.__dict__, "uploaded": False})
    assert store.list("code/") == [first.key]
    with pytest.raises(PermanentError, match="over the limit"):
        codepack.publish(store, root, 4)
