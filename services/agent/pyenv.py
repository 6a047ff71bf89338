"""``setup: {pip: FILE}``: a trial's virtualenv, built with uv once per node and shared.

An env is named by its content, never by a file name: the requirements
file's bytes, the bytes of every local file, wheel or folder it names (and of
the ``-r``/``-c`` files it includes), the agent's Python (version and
interpreter) and the agent's installed distributions. Two sweeps with the
same requirements share one env; a changed wheel behind an unchanged line
gets a new one.

An env builds on the agent's environment: ``--system-site-packages`` plus a
``.pth`` that adds the agent's own site folders after the env's, and every
distribution the agent has is left out of uv's resolution (``--excludes``)
unless the file names it with a version the agent's does not satisfy. uv
sees neither system nor ``.pth`` packages (it would download torch again),
so the exclusion is what keeps the agent's torch, CUDA build and all.

Per node: ``<workdir>/pyenvs/envs/<key>`` behind two file locks. A trial
holds ``locks/<key>.use`` shared from before the build to its end, and takes
``locks/<key>.build`` exclusively to build (a second trial wanting the same
env waits on that build); eviction (least recently used first, above the size
cap) takes ``.use`` exclusively without waiting, so it only removes envs no
trial is building or running in.

The file is read and checked by :mod:`.requirements` (every path inside the
workdir, every URL public https) and uv installs from the file as read. With a
trial user the build runs as that user, in ``builds/<key>`` (0700), without a
cache (a cache the trial users share would let one poison another sweep's
env), and the built env is then made the agent's and read-only; without one,
uv's cache (``uv-cache/``) stays across builds. The build's log is 0600, and the
error a failed build gives shows no absolute path outside the workdir.

An env may hold a sweep's private wheels, so no other sweep's trial reads it:
``pyenvs/`` and ``envs/`` are 0711 (entered, not listed), an env is 0700
while it builds and then behind a gate of its own (:mod:`.tree_gate`, its
top folder ``root:<gid> 0750``), whose gid only the trials that run in it
get. An env built before gates is gated when next used; an agent that does
not gate (not root) leaves it 0755, its trials all being its own user.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from spotsweep.services.agent import requirements as requirements_file
from spotsweep.services.agent import tree_gate
from spotsweep.services.agent.trial_env import passes
from spotsweep.services.agent.trial_user import TrialUser
from spotsweep.shared.errors import PermanentError, Refused

BUILD_SECONDS = 3600.0  # one build, at most (a hung index must not hold the lock forever)
READY = ".spotsweep-ready"  # written last: its size line is the env's; its mtime, the env's last use
TAIL_CHARS = 4000
_ABSOLUTE = re.compile(r"(?<![\w:/.~-])/[^\s'\"`,;:()\[\]<>]+")
_NETWORK = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
            "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR")


class NoInstaller(PermanentError):
    """This node has no ``uv``: the node's fault, not the spec's."""


def _feed(path: Path, digest: hashlib._Hash) -> None:
    """A file's bytes, or a folder's files (names relative to it, and bytes) in sorted order. A link in a folder
    counts by its target's name, never its content (a link to /dev/zero or a root-only file is not read)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_symlink() or p.is_file())
    for f in files:
        data = b"->" + os.fsencode(os.readlink(f)) if f != path and f.is_symlink() else f.read_bytes()
        digest.update(str(f.relative_to(path) if f != path else "").encode() + b"\0" + len(data).to_bytes(8, "big") + data)


@cache
def installed() -> tuple[tuple[str, str], ...]:
    """The agent's distributions, (canonical name, version), sorted: what a trial sees through the ``.pth``."""
    found = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    return tuple(sorted(found.items()))


def excludes(named: list[str], agent: Mapping[str, str]) -> list[str]:
    """The agent's distributions uv leaves out: all of them but those a line names with a version
    the agent's does not satisfy (``torch==2.4`` on an agent with 2.5 is built into the env)."""
    wanted = set()
    for line in named:
        try:
            req = Requirement(line)
            have = agent.get(canonicalize_name(req.name))
            if have is not None and req.specifier and not req.specifier.contains(Version(have), prereleases=True):
                wanted.add(canonicalize_name(req.name))
        except (InvalidRequirement, InvalidVersion):
            continue  # uv says what is wrong with the line
    return sorted(name for name in agent if name not in wanted)


def env_key(requirements: Path, root: Path) -> tuple[str, requirements_file.Read]:
    """(the env's key, the file as read): see the module's docstring for what goes in."""
    found = requirements_file.read(requirements, root)
    digest = hashlib.sha256(b"spotsweep-pyenv-2\0")
    digest.update(f"{sys.version}\0{os.path.realpath(sys.executable)}\0".encode())
    digest.update(repr(installed()).encode())
    for file in found.files:
        data = file.read_bytes()
        digest.update(len(data).to_bytes(8, "big") + data)
    for path in found.paths:
        _feed(path, digest)
    return digest.hexdigest()[:32], found


def _uv() -> str:
    try:
        from uv import find_uv_bin  # the PyPI package `uv` (the worker extra)
        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise NoInstaller("setup.pip needs uv on the agent (pip install 'spotsweep[worker]')") from None
        return found


def _private(path: Path, user: TrialUser | None, mode: int = 0o700) -> Path:
    """A fresh folder only the agent (and the building user) may enter."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=mode, parents=True)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


def _seal(env: Path) -> None:
    """The built env is the agent's and read-only to all others: no trial user changes what another sweep runs."""
    uid, gid = os.getuid(), os.getgid()
    for root, dirs, files in os.walk(env):
        for name in [".", *dirs, *files]:
            path = os.path.join(root, name)
            os.chown(path, uid, gid, follow_symlinks=False)
            if not os.path.islink(path):
                os.chmod(path, os.lstat(path).st_mode & 0o7755 & ~0o6000)


def redact(text: str, root: Path) -> str:
    """The installer's output with every absolute path outside ``root`` (the workdir) shown as ``<path>``."""
    def one(m: re.Match[str]) -> str:
        path = Path(m.group())
        return str(path.relative_to(root)) if path.is_relative_to(root) else "<path>"
    return _ABSOLUTE.sub(one, text)


def _build(env: Path, found: requirements_file.Read, no_build: bool, user: TrialUser | None) -> None:
    """uv venv + uv pip install into ``env``, as ``user`` when given; raises Refused with the installer's tail."""
    uv, base = _uv(), env.parent.parent
    work = _private(base / "builds" / env.name, user)  # uv's input: the file as read, includes inlined
    reqs, cons = requirements_file.flatten(found, work)
    excluded = work / "excludes.txt"
    excluded.write_text("".join(f"{n}\n" for n in excludes(found.named, dict(installed()))))
    _private(env, user)  # no other trial reads it before its gate is made (_gate)
    agent_env = {k: v for k, v in os.environ.items() if passes(k) or k.startswith("UV_") or k in _NETWORK}
    run_env = {**agent_env, "HOME": str(work), "TMPDIR": str(work), "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    # A cache the trial users share would let one poison the env another sweep's trials run in.
    run_env.update({"UV_NO_CACHE": "1"} if user is not None else {"UV_CACHE_DIR": str(base / "uv-cache")})
    steps = [[uv, "venv", "--allow-existing", "--python", sys.executable, "--system-site-packages", str(env)],
             [uv, "pip", "install", "--python", str(env / "bin" / "python"), "-r", str(reqs), "-c", str(cons),
              "--excludes", str(excluded), *(["--no-build"] if no_build else [])]]
    log = base / "locks" / f"{env.name}.log"
    log.unlink(missing_ok=True)
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:  # the agent's alone
        for i, argv in enumerate(steps):
            try:
                rc = subprocess.run(argv, cwd=work, env=run_env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, timeout=BUILD_SECONDS,
                                    **(user.popen() if user is not None else {})).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            if rc != 0:
                tail = redact(log.read_bytes()[-TAIL_CHARS:].decode("utf-8", "replace"), found.root).strip()
                shutil.rmtree(env, ignore_errors=True)
                shutil.rmtree(work, ignore_errors=True)
                raise Refused(f"uv {argv[1]} {argv[2] if i else ''}".rstrip() + f" failed (exit {rc}):\n{tail}")
            if i == 0:  # the agent's site folders after the env's own: its torch is the trial's
                pth = "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages())
                next((env / "lib").glob("python*/site-packages")).joinpath("_spotsweep_agent.pth").write_text(pth)
    shutil.rmtree(work, ignore_errors=True)
    _seal(env)
    size = sum(p.lstat().st_size for p in env.rglob("*"))
    (env / READY).write_text(f"{size}\n")


def _gate(env: Path) -> None:
    """``env`` behind a gate of its own (:mod:`.tree_gate`), or, where this agent does not gate, open to all."""
    tree_gate.ensure(env.parent, env, tree_gate.ENVS)
    if not tree_gate.is_gate(os.stat(env).st_gid):
        os.chmod(env, 0o755)


def evict(base: Path, cap_bytes: int, keep: str) -> list[str]:
    """Remove the least recently used envs no trial holds until the rest fit ``cap_bytes``; the removed keys."""
    ready = [(p.stat().st_mtime, p.parent) for p in (base / "envs").glob(f"*/{READY}")]
    sizes = {env.name: int((env / READY).read_text() or 0) for _, env in ready}
    total, removed = sum(sizes.values()), []
    for _, env in sorted(ready):
        if total <= cap_bytes:
            break
        if env.name == keep:
            continue
        with (base / "locks" / f"{env.name}.use").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a trial runs in it
            (env / READY).unlink(missing_ok=True)
            shutil.rmtree(env, ignore_errors=True)
        total -= sizes[env.name]
        removed.append(env.name)
    return removed


@contextmanager
def lease(base: Path, requirements: Path, root: Path, cap_bytes: int, no_build: bool = False,
          user: TrialUser | None = None) -> Iterator[Path]:
    """The env for ``requirements`` (a file under ``root``, the trial's code), built if missing (as ``user``, the
    trial's, when given), held (shared) until the block ends. Raises :class:`Refused` (a bad file, a failed build)
    or :class:`NoInstaller`."""
    key, found = env_key(requirements, root)
    for sub in ("envs", "locks"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for folder in (base, base / "envs"):
        os.chmod(folder, 0o711)  # trials enter to reach their own env (gated), list none
    env = base / "envs" / key
    with (base / "locks" / f"{key}.use").open("a") as use, (base / "locks" / f"{key}.build").open("a") as build:
        fcntl.flock(use, fcntl.LOCK_SH)  # in use from now on: not evicted (an eviction under way ends first)
        fcntl.flock(build, fcntl.LOCK_EX)  # the first builds; the others wait here
        try:
            if not (env / READY).exists():
                _build(env, found, no_build, user)
            _gate(env)  # built now, or before gates: gated from here on
            os.utime(env / READY)  # last used: now
        finally:
            fcntl.flock(build, fcntl.LOCK_UN)
        evict(base, cap_bytes, keep=key)
        yield env
