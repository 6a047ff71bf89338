"""Running a trial's command in an OCI image with Docker or Podman (the agent's ``--runtime``).

The trial contract does not change inside a container, because the container
sees the run's files at the paths the host does: the run's tree (working
directory, ``SPOTSWEEP_METRICS``, ``SPOTSWEEP_CHECKPOINT_DIR``) is bind-mounted
at its own path, each staged input read-only at the path its link points to,
and the agent still supervises a child process: the runtime's client
(``docker run`` in the foreground). The client forwards the signals it gets
(``--sig-proxy``, its default) to the container's init (``--init``), which
passes them to the command, so SIGTERM and the grace work as in process mode.
A SIGKILL cannot be forwarded: :func:`~.signals.killpg` calls :meth:`Runtime.kill`
for a container's group first. If the agent itself dies, its watchdog kills
every process carrying the agent's token, which the container's processes do
(it is in their environment), and the next agent removes the stopped
containers (:meth:`Runtime.remove_stale`).

Why the CLI and not an API client: the same argv serves Docker and Podman
(``podman`` takes Docker's flags), the user's registry credentials and
daemon settings apply as for ``docker run``, and a trial runs for minutes, so
a client process per trial costs nothing that matters (bench/containers.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
import subprocess
import time
from collections.abc import Mapping
from typing import BinaryIO
from dataclasses import dataclass
from pathlib import Path

from spotsweep.services.agent.trial_user import TrialUser
from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.messages import Failure, TrialMessage

_log = log.get("spotsweep.agent")
LABEL = "io.spotsweep.agent"  # every trial container carries it: the agent's workdir, for remove_stale
INSTANCE = "io.spotsweep.instance"  # and the id of the agent process that owns it, whose lock says whether it lives
# The trial's variables that describe the host, not the container: the image's own apply.
_HOST_ONLY = frozenset({b"PATH", b"VIRTUAL_ENV", b"HOME", b"CUDA_VISIBLE_DEVICES"})
PULL_TIMEOUT = 3600.0  # a multi-GB training image on a slow link
# The agent's variables the runtime's client reads (its daemon, its config, rootless Podman's socket).
_RUNTIME_VARS = (b"DOCKER_", b"CONTAINER_", b"CONTAINERS_", b"XDG_RUNTIME_DIR", b"REGISTRY_AUTH_FILE")


class ImageUnavailable(PermanentError):
    """The trial's image is not on the node and cannot be pulled: the trial fails (failure kind ``image``), for good."""


@dataclass(frozen=True)
class Mounts:
    """What the container sees of the host, each at its host path: (path, read-only)."""

    paths: tuple[tuple[str, bool], ...]

    @classmethod
    def of(cls, root: Path, cwd: Path, inputs: list[Path]) -> Mounts:
        """The run's tree and the working directory (writable), and each staged input's target (read-only)."""
        rw = [str(root)] + ([str(cwd)] if not cwd.is_relative_to(root) else [])
        ro = [os.path.realpath(p) for p in inputs]
        return cls(tuple((p, False) for p in rw) + tuple((p, True) for p in dict.fromkeys(ro)))


@dataclass(frozen=True)
class Request:
    """What one trial asks of its container (the message's resources, the slot's GPUs, the spec's network)."""

    image: str
    cpus: float | None = None
    memory: int | None = None
    shm: int | None = None
    gpus: str | None = None  # the slot's devices, as CUDA_VISIBLE_DEVICES names them: "0" or "2,3"
    network: str = "bridge"
    user: tuple[int, int] | None = None  # uid, gid
    pids: int | None = None  # the spec's limits.pids; None: the agent's --pids-limit
    groups: tuple[int, ...] = ()  # its supplementary groups: its own input trees' gates (tree_gate.py)


@dataclass(frozen=True)
class Policy:
    """What the operator allows every trial container (the agent's flags): a trial cannot widen it."""

    pids: int = 4096  # --pids-limit: processes and threads at once (a spec's limits.pids may ask fewer)
    tmp_bytes: int = 2**30  # --tmp-size: the in-memory /tmp (the runtime's default is half the node's memory)
    memory: int | None = None  # the limit of a trial without resources.memory: its slot's share (capacity.share)
    host_network: bool = False  # --allow-host-network: may a spec say network: host


@dataclass(frozen=True)
class Exited:
    """What the runtime recorded of a trial container's end: its memory limit's OOM killer ended it; its process
    started (else the runtime failed or refused to start it, and the client's exit code is not the trial's)."""

    oom: bool = False
    started: bool = True


@dataclass(frozen=True)
class Runtime:
    """A container runtime's CLI (``docker`` or ``podman``) and the image trials without ``image`` run in."""

    binary: str
    default_image: str | None
    owner: str  # the agent's workdir: labels its containers, so the next agent there removes what this one left
    instance: str = "test"  # this agent process's id: its lock file under ``owner``/agents is held while it lives
    policy: Policy = Policy()

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=timeout, check=False)

    def image_id(self, image: str) -> str:
        """The image's id (``sha256:…``), pulled first when the node lacks it (as ``docker run`` does, so an image
        built on the node is used as it is); raises :class:`ImageUnavailable` with the runtime's reason."""
        found = self._run("image", "inspect", "--format", "{{.Id}}", image)
        if found.returncode != 0:
            started = time.monotonic()
            try:
                pulled = self._run("pull", "--quiet", image, timeout=PULL_TIMEOUT)
            except subprocess.TimeoutExpired as e:
                raise ImageUnavailable(f"image {image!r}: not pulled within {PULL_TIMEOUT:g} s") from e
            if pulled.returncode != 0:
                why = (pulled.stderr.strip() or pulled.stdout.strip()).splitlines()[-1:] or ["no reason given"]
                raise ImageUnavailable(f"image {image!r} is not on this node and cannot be pulled: {why[0][:300]}")
            _log.info("image pulled", image=image, seconds=round(time.monotonic() - started, 1))
            found = self._run("image", "inspect", "--format", "{{.Id}}", image)
        return found.stdout.strip()

    def command(self, name: str, request: Request, argv: list[str], cwd: Path, env: Mapping[bytes, bytes],
                mounts: Mounts) -> list[str]:
        """The client's argv that runs ``argv`` as the trial: its environment passed by name (``-e NAME``: the
        values never show in the process table), read-only root, a bounded ``/tmp`` in memory, no swap past the
        memory limit, no capabilities and no setuid gain, at most ``pids`` processes (docs/security.md)."""
        r, policy = request, self.policy
        # The spec's argv overrides the image's ENTRYPOINT (argv[0] resolved in the image's PATH) and HEALTHCHECK;
        # it runs as the trial user or, for a root trial, as the agent's own ids, so the run's folders are writable
        # whatever the image's USER. No capability is added back: none is needed to run as a plain user in files
        # it owns, and a setuid binary in the image stays the trial's user (no-new-privileges).
        user = r.user if r.user is not None else (os.getuid(), os.getgid())
        args = [self.binary, "run", "--name", name, "--init", "--read-only",
                "--tmpfs", f"/tmp:rw,exec,size={policy.tmp_bytes}", "--security-opt", "no-new-privileges",
                "--cap-drop", "ALL", "--pids-limit", str(r.pids or policy.pids),
                "--label", f"{LABEL}={self.owner}", "--label", f"{INSTANCE}={self.instance}", "--workdir", str(cwd),
                "--network", r.network, "--env", "HOME=/tmp", "--no-healthcheck", "--entrypoint", argv[0],
                "--user", f"{user[0]}:{user[1]}", *(f"--group-add={g}" for g in r.groups)]
        if r.cpus is not None:
            args += ["--cpus", f"{r.cpus:g}"]
        memory = r.memory if r.memory is not None else policy.memory
        if memory is not None:
            args += ["--memory", str(memory), "--memory-swap", str(memory)]
        if r.shm is not None:
            args += ["--shm-size", str(r.shm)]
        args += self._gpus(r.gpus)
        for path, ro in mounts.paths:
            args += ["--volume", f"{path}:{path}" + (":ro" if ro else "")]
        for key in sorted(env):
            if key not in _HOST_ONLY:
                args += ["--env", os.fsdecode(key)]
        return [*args, r.image, *argv[1:]]

    def start(self, name: str, image: str, msg: TrialMessage, env: dict[bytes, bytes], cwd: Path, root: Path,
              user: TrialUser | None, out: BinaryIO, err: BinaryIO) -> subprocess.Popen[bytes]:
        """Start the client that runs ``msg``'s command in ``image`` as container ``name``, in a session of its
        own (``env``: the trial's environment; ``root``: the run's tree; its logs go to ``out`` and ``err``)."""
        gpus = env.get(b"CUDA_VISIBLE_DEVICES")
        request = Request(image, msg.cpus, msg.memory, msg.shm, gpus.decode() if gpus else None, msg.network,
                          (user.uid, user.gid) if user is not None else None, msg.limits.pids,
                          user.groups if user is not None else ())
        argv = self.command(name, request, msg.argv, cwd, env, Mounts.of(root, cwd, [cwd / i.to for i in msg.inputs]))
        # The client runs as the agent, with its registry credentials and daemon settings.
        own = {k: v for k, v in os.environb.items() if k in (b"PATH", b"HOME") or k.startswith(_RUNTIME_VARS)}
        return subprocess.Popen(argv, cwd=root, env={**env, **own}, stdout=out, stderr=err, start_new_session=True)

    def _gpus(self, gpus: str | None) -> list[str]:
        """The slot's GPUs: Docker's ``--gpus`` (the NVIDIA container toolkit), Podman's CDI devices."""
        if not gpus:
            return []
        ids = gpus.split(",")
        if os.path.basename(self.binary).startswith("podman"):
            return [arg for i in ids for arg in ("--device", f"nvidia.com/gpu={i}")]
        # NVIDIA_VISIBLE_DEVICES names the host's ids for the resource sampler (resources.py) as the toolkit does.
        return ["--gpus", f'"device={gpus}"', "--env", f"NVIDIA_VISIBLE_DEVICES={gpus}"]

    @staticmethod
    def failure(rc: int | None) -> Failure | None:
        """What the client's own exit codes mean (``docker run``'s and ``podman run``'s): 126 and 127 the command
        cannot run in the image (the spec's); None: the command's own exit. 125 is not read here: it is the trial's
        when its container started, else a probe decides (verdict.py)."""
        return {126: "refused", 127: "refused"}.get(rc) if rc is not None else None  # type: ignore[return-value]

    def pid(self, name: str, wait: float = 10.0) -> int | None:
        """The host pid of the container's init once it runs (for the resource samples); None if it never did."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            state = self._run("inspect", "--format", "{{.State.Pid}} {{.State.Status}}", name).stdout.split()
            if state and state[0].isdigit() and int(state[0]) > 0:
                return int(state[0])
            if state[1:] and state[1] in ("exited", "dead"):
                return None
            time.sleep(0.05)
        return None

    def kill(self, name: str) -> None:
        """SIGKILL the container (the client cannot forward that signal); one already gone is not an error."""
        self._run("kill", name, timeout=30.0)

    def finish(self, name: str) -> Exited:
        """Remove the exited container; what the runtime recorded of its end (verdict.py)."""
        state = self._run("inspect", "--format", "{{.State.OOMKilled}} {{.State.StartedAt}}", name).stdout.split()
        self._run("rm", "--force", name, timeout=60.0)
        return Exited(oom=state[:1] == ["true"], started=len(state) > 1 and not state[1].startswith("0001-01-01"))

    def remove_stale(self) -> None:
        """Remove the containers on this workdir whose owning agent is gone (killed outright): never a live
        agent's, whose instance lock is held (:func:`hold`). A container without an owner label is left alone."""
        for lock in (Path(self.owner) / "agents").glob("*.lock"):  # the lock files of agents that are gone go first
            if lock.stem != self.instance:
                alive(Path(self.owner), lock.stem)
        left = self._run("ps", "--all", "--quiet", "--filter", f"label={LABEL}={self.owner}").stdout.split()
        if not left:
            return
        owners = self._run("inspect", "--format", f'{{{{.Id}}}} {{{{index .Config.Labels "{INSTANCE}"}}}}', *left)
        doomed = [cid for cid, _, owner in (line.partition(" ") for line in owners.stdout.splitlines())
                  if owner.strip() and owner.strip() != self.instance and not alive(Path(self.owner), owner.strip())]
        if doomed:
            _log.info("removing containers an agent that is gone left", count=len(doomed))
            self._run("rm", "--force", *doomed, timeout=120.0)


_held: dict[Path, int] = {}  # the lock files this process holds, open for its whole life


def hold(workdir: Path, instance: str) -> None:
    """Take ``instance``'s lock under ``workdir`` (an ``flock`` the kernel drops when this process dies). Another
    agent's :func:`alive` may lock and unlink the new file before this one locks it: then again, on a new file."""
    path = workdir / "agents" / f"{instance}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while such an alive() looks
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    _held[path] = fd


def alive(workdir: Path, instance: str) -> bool:
    """Whether the agent ``instance`` on ``workdir`` still holds its lock (False: it is gone, its lock file removed)."""
    path = workdir / "agents" / f"{os.path.basename(instance)}.lock"
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(path).st_ino == os.fstat(fd).st_ino:  # not unlinked and made again meanwhile (hold)
                path.unlink()  # while locked: an agent taking it now finds its file gone and makes another
                return False
        except BlockingIOError:
            return True  # its agent (this one included) holds it
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)


def refused(msg: TrialMessage, policy: Policy) -> str | None:
    """Why the operator's ``policy`` does not let ``msg`` run in a container here, naming the field and the flag."""
    if msg.network == "host" and not policy.host_network:
        return ("network: host shares the node's network (its loopback services, its metadata address) with the "
                "trial; this agent does not allow it (start agents with --allow-host-network to), use bridge or none")
    if msg.limits.pids is not None and msg.limits.pids > policy.pids:
        return f"limits.pids: {msg.limits.pids} asked, this agent allows at most {policy.pids} (--pids-limit)"
    return None


def image_for(msg: TrialMessage, runtime: Runtime | None) -> tuple[str, str] | None:
    """The run's (image, id), pulled when missing, under a container runtime; None in process mode.
    Raises :class:`ImageUnavailable`, or :class:`PermanentError` for a spec this agent cannot run."""
    if runtime is None:
        if msg.image is not None:
            raise PermanentError(f"the trial asks for image {msg.image!r}, but this agent runs trials as processes "
                                 f"(--runtime process): run it on agents started with --runtime docker or podman")
        return None
    refusal = refused(msg, runtime.policy)
    if refusal is not None:
        raise PermanentError(refusal)
    if msg.setup_pip is not None:
        raise PermanentError("setup.pip builds a virtualenv for process mode; this agent runs trials in containers "
                             "(--runtime): install the packages in the image: a Dockerfile `FROM` the image that runs "
                             "`pip install -r requirements.txt`, built on the node with `docker build -t NAME .` "
                             "(docs/trial-contract.md, \"The seed's template in an image\")")
    image = msg.image or runtime.default_image
    if image is None:
        raise PermanentError("the spec names no image and this agent has no --default-image (SPOTSWEEP_DEFAULT_IMAGE): "
                             "give the spec an image, or start the agent with --default-image")
    return image, runtime.image_id(image)


def from_settings(kind: str, default_image: str | None, workdir: Path, policy: Policy = Policy()) -> Runtime | None:
    """``--runtime``'s Runtime, its binary found and its daemon answering, and what an earlier agent on ``workdir``
    left removed; None for ``process``. A runtime that cannot serve trials stops the agent (exit 2) naming the flag."""
    if kind == "process":
        return None
    binary = shutil.which(kind)
    if binary is None:
        raise PermanentError(f"--runtime {kind}: no {kind!r} program on PATH (install it, or use --runtime process)")
    try:
        answer = subprocess.run([binary, "version", "--format", "{{.Server.Version}}"], capture_output=True,
                                text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        answer = subprocess.CompletedProcess([], 1, "", "no answer in 30 s")
    if answer.returncode != 0:
        why = (answer.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise PermanentError(f"--runtime {kind}: {kind} cannot run containers here: {why[:300]}")
    runtime = Runtime(binary, default_image or None, str(workdir.resolve()), uuid.uuid4().hex[:16], policy)
    hold(Path(runtime.owner), runtime.instance)
    runtime.remove_stale()
    return runtime
