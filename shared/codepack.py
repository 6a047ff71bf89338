"""A sweep's ``workdir`` as one deterministic ``.tar.gz``, named by its sha256.

``spotsweep submit`` packs the directory so that agents on other nodes run
the trial's code without sharing a file system (as Ray's
``runtime_env.working_dir`` and SkyPilot's ``workdir`` do). What goes in:

* every file and folder under the directory but those a ``.gitignore`` or a
  ``.spotsweepignore`` excludes (gitignore semantics through the ``pathspec``
  library, each file applying to its own folder and below; in one folder the
  ``.spotsweepignore`` is read after the ``.gitignore``, so ``!big.bin`` there
  takes back a file git ignores), and never a ``.git`` folder;
* symbolic links as links, when they point inside the directory (another is
  refused, naming it: the agent would refuse it too).

The same tree always gives the same bytes (entries sorted, times, owners and
the gzip header fixed, modes reduced to 0644/0755), so the same code is
uploaded once however often it is submitted (``code/<sha256>.tar.gz``).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pathspec

from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError

IGNORE_FILES = (".gitignore", ".spotsweepignore")
NEVER = (".git",)  # a repository's own folder is never code
MiB = 1024 * 1024


def code_key(sha256: str) -> str:
    """The store key of a packed workdir."""
    return f"code/{sha256}.tar.gz"


@dataclass(frozen=True)
class Entry:
    """One thing to pack: its ``/``-separated path under the root, and what it is."""

    path: str
    kind: str  # file | dir | link
    size: int = 0
    executable: bool = False
    target: str = ""  # a link's target


_Rules = list[tuple[str, pathspec.GitIgnoreSpec]]  # (folder under the root, "" or "a/b/"; its patterns)


def _rules_of(folder: Path) -> pathspec.GitIgnoreSpec | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(encoding="utf-8", errors="replace").splitlines()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _ignored(rules: _Rules, rel: str, is_dir: bool) -> bool:
    """Git's answer: the deepest ignore file with a pattern that matches decides (its last match wins)."""
    for base, spec in reversed(rules):
        result = spec.check_file(rel[len(base):] + ("/" if is_dir else ""))
        if result.include is not None:
            return bool(result.include)
    return False


def select(root: Path) -> list[Entry]:
    """What :func:`pack` puts in the archive, in archive order (each folder's entries sorted by name)."""
    out: list[Entry] = []
    _walk(root, "", [], out, root.resolve())
    return out


def _walk(folder: Path, rel: str, rules: _Rules, out: list[Entry], real_root: Path) -> None:
    spec = _rules_of(folder)
    if spec is not None:
        rules = [*rules, (rel, spec)]
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        path = rel + entry.name
        st = entry.stat(follow_symlinks=False)
        is_dir = stat.S_ISDIR(st.st_mode)
        if entry.name in NEVER or _ignored(rules, path, is_dir):
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append(Entry(path, "link", target=_inside(folder, entry.name, path, real_root)))
        elif is_dir:
            out.append(Entry(path, "dir"))
            _walk(Path(entry.path), path + "/", rules, out, real_root)
        elif stat.S_ISREG(st.st_mode):
            out.append(Entry(path, "file", st.st_size, bool(st.st_mode & stat.S_IXUSR)))
        else:
            raise PermanentError(f"workdir: {path!r} is not a file, folder or link (a socket or a FIFO?): "
                                 "it cannot be packed; add it to .spotsweepignore")


def _inside(folder: Path, name: str, path: str, real_root: Path) -> str:
    """A link's target, if it stays inside the workdir; else a clear refusal."""
    target = os.readlink(folder / name)
    resolved = Path(os.path.normpath(folder.resolve() / target))
    if os.path.isabs(target) or not resolved.is_relative_to(real_root):
        raise PermanentError(f"workdir: the link {path!r} -> {target!r} points outside the workdir, where agents have "
                             "no such file: replace it with what it points to, or add it to .spotsweepignore")
    return target


def check_size(entries: list[Entry], limit: int, shown: int = 5) -> int:
    """The files' total size; past ``limit`` a :class:`PermanentError` naming both and the biggest files."""
    total = sum(e.size for e in entries)
    if total <= limit:
        return total
    biggest = sorted((e for e in entries if e.kind == "file"), key=lambda e: (-e.size, e.path))[:shown]
    names = ", ".join(f"{e.path} ({_mib(e.size)})" for e in biggest)
    raise PermanentError(f"workdir: its files come to {_mib(total)}, over the limit of {_mib(limit)} "
                         f"(SPOTSWEEP_WORKDIR_LIMIT_MIB); the biggest: {names}. Add what trials do not need to "
                         ".spotsweepignore (data belongs in the store or on the nodes), or raise the limit")


def _mib(size: int) -> str:
    return f"{size / MiB:.1f} MiB"


class _Hashing:
    """A write-only file that hashes what passes through it."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.hash = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def _info(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if entry.kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif entry.kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.target
    else:
        info.size, info.mode = entry.size, 0o755 if entry.executable else 0o644
    return info


def pack(root: Path, entries: list[Entry], out: BinaryIO) -> str:
    """Write ``entries`` of ``root`` to ``out`` as a .tar.gz; return its sha256 (hex)."""
    sink = _Hashing(out)
    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0, compresslevel=6) as gz:  # type: ignore[arg-type]
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for entry in entries:
                info = _info(entry)
                if entry.kind != "file":
                    tar.addfile(info)
                    continue
                with open(root / entry.path, "rb") as f:
                    if os.fstat(f.fileno()).st_size != entry.size:
                        raise PermanentError(f"workdir: {entry.path!r} changed while it was packed: submit again")
                    tar.addfile(info, f)
    return sink.hash.hexdigest()


@dataclass(frozen=True)
class Packed:
    """A workdir as it went to the store."""

    sha256: str
    key: str
    files: int
    size: int  # the files' total size, bytes
    archive_size: int  # the .tar.gz's
    uploaded: bool  # False: the store had this very archive already


def publish(store: ArtifactStore, root: Path, limit: int) -> Packed:
    """Pack ``root`` and upload it as ``code/<sha256>.tar.gz`` unless the store has that key already."""
    entries = select(root)
    size = check_size(entries, limit)
    with tempfile.TemporaryDirectory(prefix="spotsweep-pack-") as tmp:
        archive = Path(tmp) / "code.tar.gz"
        with archive.open("wb") as out:
            sha256 = pack(root, entries, out)
        key = code_key(sha256)
        uploaded = not store.exists(key)
        if uploaded:
            store.put_file(key, archive)
        return Packed(sha256, key, sum(e.kind == "file" for e in entries), size, archive.stat().st_size, uploaded)
