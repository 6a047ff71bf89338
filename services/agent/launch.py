"""Starting one run's process: its environment, its argv, and the process itself (as its user, in its
memory cgroup, with its venv's python, or in its container), registered with the agent's watchdog and reaper."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from spotsweep.services.agent import ro_mount, tree_gate
from spotsweep.services.agent.cgroup import TrialCgroup
from spotsweep.services.agent.orphans import Reaper
from spotsweep.services.agent.signals import killpg, on_kill
from spotsweep.services.agent.supervise import RunnerConfig
from spotsweep.services.agent.trial_env import tracker_ids, trial_environment
from spotsweep.services.agent.trial_user import TrialUser
from spotsweep.services.agent.watchdog import TOKEN_VAR, Watchdog
from spotsweep.services.agent.workspace import Paths
from spotsweep.shared.messages import Failure, TrialMessage

_NOT_RUNNABLE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ENOEXEC, errno.EISDIR, errno.ELOOP,
                           errno.ENAMETOOLONG, errno.E2BIG})  # E2BIG: the spec's arguments or environment, too long
# Started on first use; kills every trial's process group if this agent dies (see .watchdog).
WATCHDOG = Watchdog()
REAPER = Reaper()  # kills what a trial left outside its process group once it is over (see .orphans)


class NotStarted(Exception):
    """A set-up step failed: the attempt ends before (or as) its process starts, with this failure kind."""

    def __init__(self, failure: Failure, error: str) -> None:
        super().__init__(error)
        self.failure: Failure = failure


def kill_all() -> None:
    """SIGKILL every live trial's process group (hard stop, before exiting)."""
    for pgid in WATCHDOG.groups():
        killpg(pgid)


def _argv(argv: list[str], env: dict[bytes, bytes], cwd: Path, python: str = sys.executable) -> list[str]:
    """The argv to exec; raises FileNotFoundError when the program does not exist
    (a relative path like ``./run.sh`` is looked for in ``cwd``, as Popen runs it)."""
    # "python" in a spec means the agent's own interpreter (or the trial's setup.pip env's), so a sweep
    # runs in the environment spotsweep is installed in, with or without an activated venv.
    argv = [python, *argv[1:]] if argv and argv[0] in ("python", "python3") else list(argv)
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=os.fsdecode(env.get(b"PATH", b"")))
    if program is None or not os.access(os.path.join(cwd, program), os.X_OK):
        raise FileNotFoundError(2, "No such file or directory (or not executable)", argv[0])
    return argv


def environment(msg: TrialMessage, metrics: Path, ckpt_dir: Path, resume: int | None, gpu: str | None,
                config: RunnerConfig | None = None, user: TrialUser | None = None,
                run_id: str | None = None, venv: Path | None = None) -> dict[bytes, bytes]:
    """The trial's environment: the allow-listed part of the agent's (read anew for every trial; never its
    credentials: :mod:`.trial_env`), the trackers' stable ids, the spec's ``env``, the trial contract's;
    ``venv``: the trial's setup.pip env, whose ``bin`` comes first on PATH."""
    agent = os.environb.copy()  # bytes: no decoding of every entry and encoding it again for Popen
    ours = {
        "SPOTSWEEP_PARAMS": json.dumps(msg.params, separators=(",", ":")), "SPOTSWEEP_SWEEP_ID": msg.sweep_id,
        "SPOTSWEEP_TRIAL_ID": msg.trial_id, "SPOTSWEEP_TRIAL_NAME": msg.trial_name, "SPOTSWEEP_ATTEMPT": str(msg.attempt),
        "SPOTSWEEP_METRICS": str(metrics), "SPOTSWEEP_CHECKPOINT_DIR": str(ckpt_dir), TOKEN_VAR: WATCHDOG.token,
        "PATH": (f"{venv / 'bin'}{os.pathsep}" if venv is not None else "") + os.path.dirname(sys.executable)
        + os.pathsep + (msg.env["PATH"] if "PATH" in msg.env else os.fsdecode(agent.get(b"PATH", b""))),
    }
    if venv is not None:
        ours["VIRTUAL_ENV"] = str(venv)
    if resume is not None:
        ours["SPOTSWEEP_RESUME_STEP"] = str(resume)
    if gpu is not None:
        ours["CUDA_VISIBLE_DEVICES"] = gpu
    if run_id is not None:
        ours["SPOTSWEEP_RUN_ID"] = run_id  # names this run alone: what it leaves behind is found by it (orphans.py)
    if user is not None:
        ours.update(user.environment())
    extra, deny = (config.trial_env_pass, config.trial_env_deny) if config is not None else ((), ())
    spec = {k: v for k, v in msg.env.items() if k != "SPOTSWEEP_RESUME_STEP"}
    return trial_environment(agent, spec, ours, extra, deny, tracker_ids(msg.sweep_id, msg.trial_id))


@dataclass(frozen=True)
class Launch:
    """How one run's process starts: its environment and folder, and its process env, cgroup or image."""

    env: dict[bytes, bytes]
    cwd: Path
    venv: Path | None = None  # setup.pip's virtualenv (process mode)
    cgroup: TrialCgroup | None = None  # its memory cgroup (process mode)
    image: tuple[str, str] | None = None  # (image, id) under a container runtime


def _spawn(launch: Launch, msg: TrialMessage, config: RunnerConfig, paths: Paths, user: TrialUser | None,
           name: str, out: BinaryIO, err: BinaryIO) -> subprocess.Popen[bytes]:
    """Start the trial's process in a session of its own: the command itself (as its user, in its cgroup, with
    its venv's python), or the container runtime's client running it in its image as container ``name``."""
    env, cwd, cgroup = launch.env, launch.cwd, launch.cgroup
    if user is not None:  # its only extra groups: the gates of its own input trees and setup.pip env (tree_gate.py)
        own = [cwd / i.to for i in msg.inputs if not i.source.startswith("/")]
        user = replace(user, groups=tree_gate.groups([*own, *([launch.venv] if launch.venv is not None else [])]))
    if launch.image is None or config.runtime is None:
        python = str(launch.venv / "bin" / "python") if launch.venv is not None else sys.executable
        joiner = cgroup.joiner() if cgroup else None
        if user is None and ro_mount.allowed():  # a root trial: its inputs read-only in a namespace of its own
            joiner = ro_mount.preexec([os.path.realpath(cwd / i.to) for i in msg.inputs if not i.source.startswith("/")],
                                      joiner)
        return subprocess.Popen(_argv(msg.argv, env, cwd, python), cwd=cwd, env=env, stdout=out, stderr=err,
                                start_new_session=True, preexec_fn=joiner,
                                **(user.popen() if user is not None else {}))
    return config.runtime.start(name, launch.image[0], msg, env, cwd, paths.root, user, out, err)


def launched(launch: Launch, msg: TrialMessage, config: RunnerConfig, paths: Paths, user: TrialUser | None,
             name: str, out: BinaryIO, err: BinaryIO) -> tuple[subprocess.Popen[bytes], int | None]:
    """Spawn the process and take charge of it: (the process, the pid whose tree is sampled, None: its own).
    Raises :class:`NotStarted` when it cannot start."""
    if config.reap_orphans:
        REAPER.adopt()  # orphans below the agent come to it, not to init: what a trial leaves is found (orphans.py)
    try:
        proc = _spawn(launch, msg, config, paths, user, name, out, err)
    except OSError as e:
        # A command that is not there or not runnable is the spec's (any submitter can name one);
        # a fork that fails (no memory, no processes left) is the node's.
        kind: Failure = "refused" if e.errno in _NOT_RUNNABLE else "agent"
        raise NotStarted(kind, f"cannot start {msg.argv[0]!r}: {e.strerror or e}") from e
    REAPER.started(proc.pid)
    if launch.cgroup is not None:
        launch.cgroup.join(proc.pid)  # in case its own preexec_fn could not (its user may not write the file)
    runtime = config.runtime if launch.image is not None else None
    if runtime is None:
        return proc, None
    on_kill(proc.pid, lambda: runtime.kill(name))
    return proc, runtime.pid(name)  # the container's init: its tree is the trial's (the client is not)
