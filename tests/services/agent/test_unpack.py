"""Unpacking a hostile code archive: caps on bytes, members and ratio counted while streaming,
and links judged by what they resolve to (services/agent/unpack.py)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from spotsweep.services.agent.unpack import MiB, Caps, extract
from spotsweep.shared.errors import Refused


def archive(path: Path, members: list[tuple[str, bytes | str | None]]) -> Path:
    """A .tar.gz of ``(name, data)``: bytes a file, str a symbolic link's target, None a folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path.write_bytes(out.getvalue())
    return path


def test_a_clean_archive_unpacks_with_its_links_and_modes(tmp_path: Path) -> None:
    a = archive(tmp_path / "a.tgz", [("./", None), ("lib", None), ("lib/a.py", b"x = 1\n"), ("a.py", "lib/a.py"),
                                     ("self", "."), ("here", "self/lib")])
    extract(a, tmp_path / "out", "code/a")
    assert (tmp_path / "out" / "a.py").read_text() == "x = 1\n"
    assert os.readlink(tmp_path / "out" / "here") == "self/lib"


def test_a_gzip_bomb_is_refused_by_the_bytes_written_before_they_all_land(tmp_path: Path) -> None:
    bomb = archive(tmp_path / "bomb.tgz", [(f"zeros{i}", b"\0" * (4 * MiB)) for i in range(8)])
    assert bomb.stat().st_size < 200_000  # 32 MiB of zeros
    with pytest.raises(Refused, match=r"code/b is refused: its files come to more than 10 MiB \(at 'zeros2'\)"):
        extract(bomb, tmp_path / "out", "code/b", Caps(bytes=10 * MiB, ratio=1e9))
    written = sum(p.stat().st_size for p in (tmp_path / "out").iterdir())
    assert written <= 10 * MiB + MiB  # stopped within one chunk of the cap


def test_a_compression_ratio_past_the_cap_is_refused_while_streaming(tmp_path: Path) -> None:
    bomb = archive(tmp_path / "bomb.tgz", [("zeros", b"\0" * (40 * MiB))])
    with pytest.raises(Refused, match=r"compressed, a ratio over 200 \(a compression bomb\?\)"):
        extract(bomb, tmp_path / "out", "code/r")
    assert (tmp_path / "out" / "zeros").stat().st_size < 40 * MiB


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    many = archive(tmp_path / "many.tgz", [(f"f{i}", b"") for i in range(30)])
    with pytest.raises(Refused, match="code/m is refused: it holds more than 20 members"):
        extract(many, tmp_path / "out", "code/m", Caps(members=20))


def test_headers_count_too_a_huge_pax_header_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("f")
        info.pax_headers = {"comment": "x" * (8 * MiB)}
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "pax.tgz").write_bytes(out.getvalue())
    with pytest.raises(Refused, match="it unpacks to more than"):
        extract(tmp_path / "pax.tgz", tmp_path / "out", "code/p", Caps(bytes=MiB, members=10))


@pytest.mark.parametrize("order", [["z", "b"], ["b", "z"]])
def test_a_link_chain_that_resolves_outside_is_refused_whatever_its_order(tmp_path: Path, order: list[str]) -> None:
    # z -> . is harmless and b -> z/.. looks harmless as text; together b is the folder's parent.
    links = {"z": ".", "b": "z/.."}
    chain = archive(tmp_path / "chain.tgz", [(name, links[name]) for name in order])
    with pytest.raises(Refused, match=r"'b' is a link to 'z/\.\.', (outside the folder|which resolves outside)"):
        extract(chain, tmp_path / "out", "code/c")


def test_nothing_is_written_through_a_link_that_came_to_resolve_outside(tmp_path: Path) -> None:
    # b is judged before z exists (inside then); once z exists b/escape would land beside the tree
    chain = archive(tmp_path / "chain.tgz", [("b", "z/.."), ("z", "."), ("b/escape", b"x")])
    with pytest.raises(Refused, match="'b/escape' is inside a folder that resolves outside the tree"):
        extract(chain, tmp_path / "out", "code/c")
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize(("members", "why"), [
    ([("../evil", b"x")], "is a path leading out of the folder"),
    ([("/abs", b"x")], "is an absolute path"),
    ([("l", "/etc")], r"is a link to '/etc', outside"),
    ([("d", None), ("d/l", "../../x")], r"is a link to '\.\./\.\./x', outside"),
])
def test_members_leading_out_are_refused(tmp_path: Path, members: list[tuple[str, bytes | str | None]],
                                         why: str) -> None:
    with pytest.raises(Refused, match=why):
        extract(archive(tmp_path / "x.tgz", members), tmp_path / "out", "code/x")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "x").exists()


def test_garbage_is_refused_as_unpackable(tmp_path: Path) -> None:
    (tmp_path / "g.tgz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip" * 10)
    with pytest.raises(Refused, match="code/g cannot be unpacked"):
        extract(tmp_path / "g.tgz", tmp_path / "out", "code/g")
