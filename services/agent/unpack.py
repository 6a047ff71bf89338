"""Unpacking a code archive nobody on this node vouches for: member by member, within caps.

A sweep's ``code/<sha256>.tar.gz`` may come from any client that can post a
spec and write to the store, so the agent treats it as hostile. ``submit``
refuses a workdir over ``SPOTSWEEP_WORKDIR_LIMIT_MIB``, but nothing stops a
hand-made archive: a 306 KB gzip bomb once became a 300 MiB tree in the cache
and again in every run's copy. So :func:`extract` streams the archive
(``tarfile``'s ``r|`` mode over a gzip stream it counts itself) and refuses,
naming the member and the cap, as soon as

* the bytes written to files pass :attr:`Caps.bytes` (counted as they are
  written, never taken from a header: a header may lie or be sparse), or the
  decompressed stream (headers included) passes that plus a little per member;
* the members pass :attr:`Caps.members`;
* the decompressed stream is over :attr:`Caps.ratio` times the compressed
  bytes read so far, once past :data:`RATIO_FLOOR` (real code compresses 3 to
  10 times; a bomb thousands of times);
* a member has an absolute path or ``..``, is a device, FIFO or hard link
  (``submit`` never packs one), or would be written where its folder resolves
  outside the tree.

Links are judged by what they resolve to, not by their text: each member's
folder is resolved (``os.path.realpath``) against what was already
extracted before anything is written there, and once every member is out,
every symbolic link is resolved again (``z -> .`` then ``b -> z/..`` points
outside only once both exist, whichever came first). Files are created with
``O_EXCL | O_NOFOLLOW``, so no member writes through a link.

A refusal is :class:`~spotsweep.shared.errors.Refused`: the archive is bad, not
the node (the attempt fails with failure kind ``refused``).
"""

from __future__ import annotations

import gzip
import os
import posixpath
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spotsweep.shared.errors import PermanentError, Refused

MiB = 1 << 20
RATIO_FLOOR = 16 * MiB  # below this much output the ratio is not judged: a small file of zeros is fine
HEADER_BYTES = 2048  # stream bytes allowed per member beyond its data (header, padding, a long name)
_CHUNK = MiB


@dataclass(frozen=True)
class Caps:
    """What one code archive may unpack to."""

    bytes: int = 100 * MiB  # the files' total size (the agent passes SPOTSWEEP_WORKDIR_LIMIT_MIB, as submit checks it)
    members: int = 50_000
    ratio: float = 200.0  # decompressed : compressed


DEFAULT_CAPS = Caps()


class _Counted:
    """The compressed file, counting what is read of it (the ratio's denominator)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.read_bytes = raw, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.read_bytes += len(data)
        return data


class _Stream:
    """The decompressed tar stream, refused once it grows past the caps (headers count too:
    a bomb need not be file data; ``tarfile`` reads a long pax header whole into memory)."""

    def __init__(self, raw: BinaryIO, caps: Caps, key: str) -> None:
        self.counted = _Counted(raw)
        self.gz = gzip.GzipFile(fileobj=self.counted, mode="rb")  # type: ignore[call-overload]
        self.caps, self.key, self.out = caps, key, 0
        self.limit = caps.bytes + HEADER_BYTES * caps.members

    def read(self, size: int = -1) -> bytes:
        data = self.gz.read(size if size >= 0 else _CHUNK)
        self.out += len(data)
        if self.out > self.limit:
            raise Refused(f"the sweep's code archive {self.key} is refused: it unpacks to more than "
                          f"{self.limit} bytes (files at most {_mib(self.caps.bytes)})")
        compressed = max(self.counted.read_bytes, 1)
        if self.out > RATIO_FLOOR and self.out > self.caps.ratio * compressed:
            raise Refused(f"the sweep's code archive {self.key} is refused: {self.out} bytes unpacked from "
                          f"{compressed} compressed, a ratio over {self.caps.ratio:g} (a compression bomb?)")
        return data


def _mib(size: int) -> str:
    return f"{size / MiB:.0f} MiB"


def _name(member: tarfile.TarInfo) -> str:
    """The member's path, normalised (``./a//b/`` is ``a/b``); a :class:`Refused` reason if it leaves the folder."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name):
        raise _Bad("an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Bad("a path leading out of the folder ('..')")
    return "/".join(parts)


class _Bad(Exception):
    """Why one member is refused (turned into a :class:`Refused` naming it)."""


class _Full(Exception):
    """The files written pass :attr:`Caps.bytes`."""


def extract(archive: Path, dest: Path, key: str, caps: Caps = DEFAULT_CAPS) -> None:
    """Extract the code archive ``archive`` into ``dest`` (new), within ``caps``; :class:`Refused`
    naming the member and the reason otherwise (``dest`` may hold a part: the caller discards it)."""
    dest.mkdir()
    root = os.path.realpath(dest)
    links: list[str] = []
    written = members = 0
    try:
        with archive.open("rb") as raw:
            stream = _Stream(raw, caps, key)
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                tar.errorlevel = 2
                for member in tar:
                    members += 1
                    if members > caps.members:
                        raise Refused(f"the sweep's code archive {key} is refused: it holds more than "
                                      f"{caps.members} members")
                    try:
                        written += _one(tar, member, root, caps.bytes - written, links)
                    except _Full:
                        raise Refused(f"the sweep's code archive {key} is refused: its files come to more than "
                                      f"{_mib(caps.bytes)} (at {member.name!r})") from None
                    except _Bad as e:
                        raise Refused(f"the sweep's code archive {key} is refused: {member.name!r} is {e}") from None
        for name in links:
            if not _inside(root, os.path.realpath(os.path.join(root, name))):
                target = os.readlink(os.path.join(root, name))
                raise Refused(f"the sweep's code archive {key} is refused: {name!r} is a link to {target!r}, "
                              "which resolves outside the folder")
    except PermanentError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
        raise Refused(f"the sweep's code archive {key} cannot be unpacked: {type(e).__name__}: {e}") from e


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _one(tar: tarfile.TarFile, member: tarfile.TarInfo, root: str, room: int, links: list[str]) -> int:
    """Extract one member; the bytes it wrote. ``room``: bytes left under the cap."""
    name = _name(member)
    if member.isdev() or member.isfifo():
        raise _Bad("a device or FIFO")
    if member.islnk():
        raise _Bad(f"a hard link to {member.linkname!r}" + (", outside the folder" if posixpath.isabs(member.linkname)
                   or ".." in member.linkname.split("/") else " (code archives hold none)"))
    if not name:
        return 0  # the archive's own top folder ("./")
    path = os.path.join(root, name)
    if not _inside(root, os.path.realpath(os.path.dirname(path))):
        raise _Bad("inside a folder that resolves outside the tree (through a link)")
    if member.isdir():
        if not os.path.isdir(path) or os.path.islink(path):
            os.makedirs(path, mode=0o755)  # a file or link of that name already: FileExistsError
        return 0
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if member.issym():
        target = member.linkname
        if posixpath.isabs(target):
            raise _Bad(f"a link to {target!r}, outside the folder")
        os.symlink(target, path)
        if not _inside(root, os.path.realpath(path)):
            raise _Bad(f"a link to {target!r}, outside the folder")
        links.append(name)
        return 0
    if not member.isreg():
        raise _Bad("not a file, folder or link")
    return _file(tar, member, path, room)


def _file(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str, room: int) -> int:
    """Copy one file's data, counting every byte written against ``room``."""
    mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
    source = tar.extractfile(member)
    assert source is not None  # a regular file always has data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while data := source.read(_CHUNK):
            written += len(data)
            if written > room:
                raise _Full
            out.write(data)
    return written
