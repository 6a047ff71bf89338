"""A ``setup.pip`` requirements file read as pip reads it, checked, and flattened for uv (issue 39).

pip joins a line ending in a backslash with the next, drops comments (``#``
at the start or after whitespace), splits a line into its requirement and
its options (the first token that starts with ``-``), and reads the options
with a shell's quoting: ``-r<TAB>x``, ``-rx``, ``--requirement=x`` and
``--requirement x`` all include ``x``. Every form is read here the same way,
so none reaches the installer unchecked:

* every file (``-r``, ``-c``) and local path (``./pkg``, ``dist/x.whl``,
  ``-f``/``--find-links``, ``name @ file:…``, ``file:…``) must resolve,
  symlinks followed, to an existing path inside the workdir;
* every URL (an index, ``--find-links``, ``name @ https://…``,
  ``git+https://…``) must be https to a host that does not look internal
  (:func:`check_url`; names are not resolved here);
* ``-e`` is refused (it would point into one run's copy of the code), and so
  is every option this reader does not know (``--trusted-host`` would allow
  plain http), and any per-line option but ``--hash``.

uv never reads the sweep's files: :func:`flatten` writes what was read, the
includes inlined and every path absolute, and uv installs from that. A line
is refused naming only its file and line number and the reason, never
the content of a file outside the workdir.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from spotsweep.services.agent.url_policy import address_refusal
from spotsweep.shared.errors import Refused

MAX_FILE_BYTES = 2**20  # a requirements file larger than this is not one
_FILES = {"-r": "requirement", "--requirement": "requirement", "-c": "constraint", "--constraint": "constraint"}
_VALUED = {"-f": "--find-links", "--find-links": "--find-links", "-i": "--index-url", "--index-url": "--index-url",
           "--extra-index-url": "--extra-index-url", "--only-binary": "--only-binary", "--no-binary": "--no-binary",
           "-e": "-e", "--editable": "-e"}
_FLAGS = frozenset({"--no-index", "--pre", "--prefer-binary"})
_URL_OPTIONS = frozenset({"--index-url", "--extra-index-url"})
_INTERNAL_NAMES = re.compile(r"(^|\.)(localhost|local|internal|intranet|lan|home\.arpa)$|^metadata(\.|$)", re.I)
_SCHEME = re.compile(r"^(?:git\+|hg\+|svn\+|bzr\+)?[a-z][a-z0-9+.-]*://", re.I)


@dataclass
class Read:
    """What a requirements file and its includes say: uv's input, and what names the env."""

    root: Path
    files: list[Path] = field(default_factory=list)  # every file read, in order, once per role (they name the env)
    paths: list[Path] = field(default_factory=list)  # every local path a line names (so do theirs)
    requirements: list[str] = field(default_factory=list)  # lines for uv: requirements and global options
    constraints: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # requirements by name (not paths or URLs), without options


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each logical line: continuations joined, comments and blank lines dropped."""
    out, held, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not held:
            start = number
        if raw.endswith("\\"):
            held += raw[:-1]
            continue
        line, held = re.sub(r"(^|\s)#.*", "", held + raw).strip(), ""
        if line:
            out.append((start, line))
    if held.strip():
        out.append((start, re.sub(r"(^|\s)#.*", "", held).strip()))
    return [(n, line) for n, line in out if line]


def split(line: str) -> tuple[str, list[str]]:
    """(the requirement, its option tokens): tokens up to the first that starts with ``-``, split at any whitespace."""
    tokens = line.split()
    first = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    try:
        options = shlex.split(" ".join(tokens[first:]))
    except ValueError as e:
        raise Refused(f"cannot read its options: {e}") from None
    return " ".join(tokens[:first]), options


def options(tokens: list[str]) -> list[tuple[str, str | None]]:
    """(option, value) pairs from option tokens: ``--name=value``, ``--name value``, ``-xvalue``, ``-x value``."""
    pairs: list[tuple[str, str | None]] = []
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        name, eq, value = token.partition("=") if token.startswith("--") else (token[:2], "", token[2:])
        if name in _FLAGS and not eq and not value:
            pairs.append((name, None))
            continue
        if name not in _FILES and name not in _VALUED and name != "--hash":
            raise Refused(f"option {name[:40]!r} is not one setup.pip takes (-r, -c, -f, -i, --index-url, "
                          f"--extra-index-url, --no-index, --pre, --prefer-binary, --only-binary, --no-binary, --hash)")
        if not eq and not value:
            if not rest:
                raise Refused(f"option {name!r} needs a value")
            value = rest.pop(0)
        pairs.append((name, value.lstrip("=") if not eq else value))
    return pairs


def check_url(url: str) -> str:
    """``url`` when it is https to a host that does not look internal; else :class:`Refused` saying why (the
    host's name is not resolved: an index's name that resolves to an internal address is the operator's DNS)."""
    parts = urlsplit(url.removeprefix("git+"))
    if parts.scheme != "https" or not parts.hostname:
        raise Refused(f"a URL must be https:// (got a {parts.scheme or 'schemeless'} URL)")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if _INTERNAL_NAMES.search(host.rstrip(".")) or "." not in host:
            raise Refused(f"host {host!r} looks internal (a bare name, localhost, .local, .internal, metadata)") from None
        return url
    why = address_refusal(address)
    if why is not None:
        raise Refused(f"host {host!r} is {why}, not a public address")
    return url


def _inside(path: Path, root: Path) -> Path:
    """The path resolved (links followed) when it exists inside ``root``; else Refused, naming it only if inside."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise Refused("it names a path outside the workdir")
    if not resolved.exists():
        raise Refused(f"{resolved.relative_to(root)} does not exist")
    return resolved


def _file_url(url: str) -> str:
    return unquote(re.sub(r"^file:(//(localhost)?)?", "", url))


def _location(value: str, base: Path, root: Path) -> str:
    """A path, ``file:`` URL or URL an option or requirement names, checked: the absolute path, or the URL."""
    if value.startswith("file:"):
        return str(_inside(base / _file_url(value), root))
    if _SCHEME.match(value):
        return check_url(value)
    return str(_inside(base / value, root))


def _requirement(req: str, pairs: list[tuple[str, str | None]], base: Path, read: Read) -> str:
    """A requirement line for uv: a name (kept), a path or URL (checked, made absolute), and its ``--hash`` options."""
    if any(name != "--hash" for name, _ in pairs):
        raise Refused("a requirement line takes no option but --hash")
    hashes = "".join(f" --hash={value}" for _, value in pairs)
    name, at, url = req.partition("@")
    if at and (_SCHEME.match(url.strip()) or url.strip().startswith("file:")):
        target, _, marker = url.strip().partition(";")
        where = _location(target.strip(), base, read.root)
        if not _SCHEME.match(where):
            read.paths.append(Path(where))
            where = Path(where).as_uri()
        return f"{name.strip()} @ {where}" + (f" ;{marker}" if marker else "") + hashes
    target = re.sub(r"\[.*$", "", req.split(";", 1)[0].strip())
    if _SCHEME.match(target) or target.startswith(("file:", ".", "/")) or "/" in target \
            or target.endswith((".whl", ".zip", ".tar.gz")):
        where = _location(target, base, read.root)
        if not _SCHEME.match(where):
            read.paths.append(Path(where))
        return req.replace(target, where, 1) + hashes
    read.named.append(req)
    return req + hashes


def _line(line: str, file: Path, read: Read, out: list[str], seen: set[tuple[Path, int]]) -> None:
    req, tokens = split(line)
    pairs = options(tokens)
    if req:
        out.append(_requirement(req, pairs, file.parent, read))
        return
    for name, value in pairs:
        if name == "--hash":
            raise Refused("--hash belongs on a requirement's line")
        if name in ("-e", "--editable"):
            raise Refused("an editable install (-e) would point into one run's copy of the workdir, which goes "
                          "with the run; name the folder without -e")
        if name in _FILES:
            _walk(_inside(file.parent / str(value), read.root), read,
                  read.constraints if _FILES[name] == "constraint" else out, seen)
        elif value is None:
            read.requirements.append(name)
        elif _VALUED[name] in _URL_OPTIONS:
            read.requirements.append(f"{_VALUED[name]} {check_url(value)}")
        elif _VALUED[name] == "--find-links":
            where = _location(value, file.parent, read.root)
            read.requirements.append(f"--find-links {where}")
            if not _SCHEME.match(where):
                read.paths.append(Path(where))
        else:
            read.requirements.append(f"{_VALUED[name]} {value}")


def _walk(file: Path, read: Read, out: list[str], seen: set[tuple[Path, int]]) -> None:
    if (file, id(out)) in seen:  # once as requirements, once as constraints
        return
    seen.add((file, id(out)))
    read.files.append(file)
    where = file.relative_to(read.root)
    if not file.is_file() or file.stat().st_size > MAX_FILE_BYTES:
        raise Refused(f"{where} is not a regular file of at most {MAX_FILE_BYTES // 2**20} MiB")
    for number, line in logical_lines(file.read_bytes().decode("utf-8", "replace")):
        try:
            _line(line, file, read, out, seen)
        except Refused as e:
            if str(e).startswith(f"{where}:") or ", line " in str(e):
                raise
            raise Refused(f"{where}, line {number}: {e}") from None


def read(requirements: Path, root: Path) -> Read:
    """``requirements`` (a file under ``root``) and all it includes, checked; :class:`Refused` naming the line."""
    root = root.resolve()
    found = Read(root)
    lines: list[str] = []
    try:
        top = _inside(requirements, root)
    except Refused as e:
        raise Refused(f"setup.pip {requirements.name!r}: {e}") from None
    _walk(top, found, lines, set())
    found.requirements.extend(lines)
    return found


def flatten(found: Read, folder: Path) -> tuple[Path, Path]:
    """Write uv's requirements and constraints files under ``folder`` (private to the agent); their paths."""
    reqs, cons = folder / "requirements.txt", folder / "constraints.txt"
    reqs.write_text("".join(f"{line}\n" for line in found.requirements))
    cons.write_text("".join(f"{line}\n" for line in found.constraints))
    return reqs, cons
