"""Run one attempt of one trial as a child process, under the process contract.

The runner restores the latest checkpoint, starts the command (never through
a shell) in a fresh working directory and its own process group, hands it to
:func:`~.supervise.supervise`, uploads the logs, and returns the attempt's
final event, or None when the planner stopped this run (nothing to report).
It blocks its worker thread for the trial's whole life; the broker's I/O
thread is never involved, so heartbeats flow during multi-hour trials.

Each start is one *run* with its own ``run_id``: a redelivered attempt runs
again under a new id, which is how the planner tells runs apart.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from dataclasses import dataclass
from typing import Any, BinaryIO

from spotsweep.services.agent import code_cache, inputs, pyenv, uploads
from spotsweep.services.agent.signals import killpg, on_kill
from spotsweep.services.agent.cgroup import TrialCgroup
from spotsweep.services.agent import container
from spotsweep.services.agent.container import ImageUnavailable
from spotsweep.services.agent.controls import RunControls
from spotsweep.services.agent.log_shipper import LogShipper
from spotsweep.services.agent.orphans import Reaper, marks
from spotsweep.services.agent.supervise import Outcome, RunnerConfig, supervise
from spotsweep.services.agent.tail import Tail
from spotsweep.services.agent.trial_env import tracker_ids, trial_environment
from spotsweep.services.agent.trial_user import TrialUser, chown_tree
from spotsweep.services.agent.watchdog import TOKEN_VAR, Watchdog
from spotsweep.services.agent import workspace
from spotsweep.services.agent.workspace import Paths
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.quantity import human_bytes
from spotsweep.shared.messages import CheckpointSaved, Envelope, Failure, Outcome as Result, TrialFinished, TrialMessage, TrialStaging, TrialStarted

__all__ = ["DeliveryLost", "RunControls", "RunnerConfig", "kill_all", "run_trial"]

_log = log.get("spotsweep.agent")
ERROR_TAIL_LINES = 20
# What a CUDA out-of-memory exit leaves on stderr (torch's error text and the
# allocator failures that come with it), for retries.on_oom.
_NOT_RUNNABLE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ENOEXEC, errno.EISDIR, errno.ELOOP,
                           errno.ENAMETOOLONG})
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "HIP out of memory")


class DeliveryLost(RetryableError):
    """The delivery died with its channel or connection; the process was killed and the broker hands the attempt out again."""

    def __init__(self, run_id: str, duration: float | None = None) -> None:
        super().__init__("the broker connection was lost: the trial was stopped and will be redelivered")
        self.run_id = run_id
        self.duration = duration  # seconds the process ran: timeout.total counts lost runs too


class _NotStarted(Exception):
    """A set-up step failed: the attempt ends before (or as) its process starts, with this failure kind."""

    def __init__(self, failure: Failure, error: str) -> None:
        super().__init__(error)
        self.failure: Failure = failure


# Started on first use; kills every trial's process group if this agent dies (see .watchdog).
WATCHDOG = Watchdog()
REAPER = Reaper()  # kills what a trial left outside its process group once it is over (see .orphans)


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


def _tail_text(f: BinaryIO, lines: int = ERROR_TAIL_LINES, limit: int = 4000) -> str:
    """The last lines of a log, read from the agent's own descriptor (never the
    path, which the trial may have swapped for a FIFO)."""
    size = os.fstat(f.fileno()).st_size
    text = os.pread(f.fileno(), 64 * 1024, max(0, size - 64 * 1024)).decode("utf-8", "replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])[-limit:]


def kill_all() -> None:
    """SIGKILL every live trial's process group (hard stop, before exiting)."""
    for pgid in WATCHDOG.groups():
        killpg(pgid)


def _agent_environment() -> dict[bytes, bytes]:
    """The agent's environment, as bytes (``os.environb``: no decoding of every
    entry and encoding it again for Popen), read anew for every trial. Only
    what :func:`~.trial_env.passes` reaches the trial (:func:`_environment`)."""
    return os.environb.copy()


def _environment(msg: TrialMessage, metrics: Path, ckpt_dir: Path, resume: int | None, gpu: str | None,
                 config: RunnerConfig | None = None, user: TrialUser | None = None,
                 run_id: str | None = None, venv: Path | None = None) -> dict[bytes, bytes]:
    """The trial's environment: the allow-listed part of the agent's (never its
    credentials: :mod:`.trial_env`), the trackers' stable ids, the spec's ``env``, the trial contract's;
    ``venv``: the trial's setup.pip env, whose ``bin`` comes first on PATH."""
    agent = _agent_environment()
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


class Confirms:
    """The events of one run, published without waiting; :meth:`wait` blocks until
    the broker confirmed all of them (one wait where there was one per event).

    The ``started`` event is the exception: the final event does not wait for
    its confirm, so a short trial's slot is not held for a broker round trip.
    Both go out on one channel to one queue, where the broker keeps their
    order, so the planner still sees the start first; a start the broker
    refused by the time the final event is due fails the run as before (the
    trial is redelivered). Metrics, progress and checkpoints do gate the final
    event: a trial must not be reported over before its points are stored.

    ``publish`` may return a Future (``Broker.publish_async``) or nothing (a
    synchronous publish, a test's list): both work."""

    def __init__(self, publish: Callable[[Envelope], Future[None] | None]) -> None:
        self._publish = publish
        self._pending: list[Future[None]] = []
        self._started: Future[None] | None = None
        self.checkpoints = 0  # checkpoints this run committed (and announced)

    def __call__(self, event: Envelope) -> None:
        if isinstance(event, CheckpointSaved):
            self.checkpoints += 1
        future = self._publish(event)
        if future is None:
            return
        if future.done():
            future.result()  # a publish that failed at once fails the run at once
        elif isinstance(event, TrialStarted):
            self._started = future
        else:
            self._pending.append(future)

    def wait(self) -> None:
        """Raises :class:`RetryableError` if the broker refused or lost one."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()
        if self._started is not None and self._started.done():
            self._started.result()


@dataclass(frozen=True)
class Launch:
    """How one run's process starts: its environment and folder, and its process env, cgroup or image."""

    env: dict[bytes, bytes]
    cwd: Path
    venv: Path | None = None  # setup.pip's virtualenv (process mode)
    cgroup: TrialCgroup | None = None  # its memory cgroup (process mode)
    image: tuple[str, str] | None = None  # (image, id) under a container runtime


def run_trial(
    msg: TrialMessage,
    store: ArtifactStore,
    publish: Callable[[Envelope], Future[None] | None],
    config: RunnerConfig,
    control: RunControls,
    gpu: str | None = None,
    *,
    redelivered: bool = False,
    losses: int = 0,
) -> TrialFinished | None:
    """Run the attempt to its end and return (not publish) its final event; every
    event published on the way but ``started`` is confirmed by the broker when
    this returns. The run gets a new scratch tree under ``config.workdir``, removed when it ends."""
    run_id = uuid.uuid4().hex[:12]
    with config.trial_users.take() if config.trial_users else nullcontext(None) as user, \
            workspace.fresh(config.workdir, f"{msg.trial_id}-a{msg.attempt}", user) as paths, ExitStack() as held:
        return _run(msg, store, Confirms(publish), config, control, gpu, redelivered, losses, run_id, paths, user, held)


@contextmanager
def _refusing(what: str) -> Iterator[None]:
    """A PermanentError in the block is the spec's: set-up step ``what`` cannot be done, the attempt did not start."""
    try:
        yield
    except PermanentError as e:
        raise _NotStarted("refused", f"{what}, so the attempt did not start: {e}") from e


def _image(msg: TrialMessage, config: RunnerConfig) -> tuple[str, str] | None:
    """The trial's (image, id) under a container runtime, pulled; None in process mode."""
    try:
        return container.image_for(msg, config.runtime)
    except ImageUnavailable as e:
        raise _NotStarted("image", str(e)) from e
    except PermanentError as e:
        raise _NotStarted("refused", str(e)) from e


def _stage(msg: TrialMessage, store: ArtifactStore, config: RunnerConfig, paths: Paths, cwd: Path,
           user: TrialUser | None, held: ExitStack) -> float | None:
    """Link the trial's inputs into its folder (held until the run ends); the seconds that took, None
    without inputs. Staged before the process starts: not the trial's running time (that starts at Popen)."""
    if not msg.inputs:
        return None
    began = time.monotonic()
    with _refusing("the trial's inputs cannot be staged"):
        if cwd != paths.run:
            raise PermanentError("inputs are linked into a run's own folder; this one runs in its workdir in place")
        held.enter_context(inputs.staged(msg, store, config.workdir / "inputs", cwd, config.input_cache_bytes, user))
    return round(time.monotonic() - began, 3)


def _venv(msg: TrialMessage, config: RunnerConfig, cwd: Path, user: TrialUser | None, held: ExitStack) -> Path | None:
    """setup.pip's virtualenv, held (shared) until the run ends: no eviction while the trial runs in it."""
    if msg.setup_pip is None:
        return None
    try:
        return held.enter_context(pyenv.lease(config.workdir / "pyenvs", cwd / msg.setup_pip, cwd,
                                              config.pip_envs_bytes, no_build=user is not None))
    except pyenv.NoInstaller as e:
        raise _NotStarted("agent", str(e)) from e
    except (PermanentError, OSError) as e:
        raise _NotStarted("refused", f"setup.pip: the trial's environment cannot be built from {msg.setup_pip!r}, "
                                     f"so the attempt did not start: {e}") from e


def _run(msg: TrialMessage, store: ArtifactStore, send: Confirms, config: RunnerConfig, control: RunControls,
         gpu: str | None, redelivered: bool, losses: int, run_id: str, paths: Paths,
         user: TrialUser | None, held: ExitStack) -> TrialFinished | None:
    """Set the run up (image, code, checkpoint, inputs, venv), then start and supervise it (:func:`_started`);
    a set-up step that fails ends the attempt before its process starts."""
    def end(outcome: Result, **fields: Any) -> TrialFinished:
        return TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, agent=config.agent_id,
                             run_id=run_id, outcome=outcome, **fields)

    if not msg.argv or not msg.argv[0]:
        return end("failed", failure="refused", error=f"the trial's command is empty (argv {msg.argv!r}): nothing to run")
    if msg.inputs or msg.setup_pip is not None or config.runtime is not None:  # set-up that may take minutes: said
        send(TrialStaging(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, agent=config.agent_id,
                          run_id=run_id))
    restored: dict[str, float] = {}
    cgroup = None
    try:
        image = _image(msg, config)
        with _refusing("the trial's code (workdir) cannot be set up"):
            cwd = code_cache.working_dir(store, config.workdir / "code", msg.workdir_sha256, config.code_dir,
                                         paths.run, config.code_caps)
        # Not run from scratch when the checkpoint cannot be restored: that would drop the progress it holds
        # unnoticed. The attempt fails with the reason, for a person to look at the store (retries meet it too).
        with _refusing("the trial's checkpoint cannot be restored"):
            resume = uploads.restore(store, msg, paths.checkpoint, restored, redelivered)
        if user is not None and resume is not None:
            chown_tree(paths.checkpoint, user)  # the restored checkpoint is the trial's, as its workspace is
        if user is not None and cwd == paths.run and msg.workdir_sha256 is not None:
            chown_tree(paths.run, user)  # so is its copy of the code
        staged = _stage(msg, store, config, paths, cwd, user, held)
        venv = _venv(msg, config, cwd, user, held)
        env = _environment(msg, paths.metrics, paths.checkpoint, resume, gpu, config, user, run_id, venv)
        if msg.memory is not None and config.cgroups is not None and image is None:  # a container has the runtime's
            cgroup = config.cgroups.make(run_id, msg.memory, user.uid if user is not None else None)
        return _started(msg, store, send, config, control, redelivered, losses, run_id, paths, user,
                        Launch(env, cwd, venv, cgroup, image), resume, restored, end, staged)
    except _NotStarted as e:
        return end("failed", failure=e.failure, error=str(e))
    finally:
        if cgroup is not None:
            cgroup.remove()


def _spawn(launch: Launch, msg: TrialMessage, config: RunnerConfig, paths: Paths, user: TrialUser | None,
           name: str, out: BinaryIO, err: BinaryIO) -> subprocess.Popen[bytes]:
    """Start the trial's process in a session of its own: the command itself (as its user, in its cgroup, with
    its venv's python), or the container runtime's client running it in its image as container ``name``."""
    env, cwd, cgroup = launch.env, launch.cwd, launch.cgroup
    if launch.image is None or config.runtime is None:
        python = str(launch.venv / "bin" / "python") if launch.venv is not None else sys.executable
        return subprocess.Popen(_argv(msg.argv, env, cwd, python), cwd=cwd, env=env, stdout=out, stderr=err,
                                start_new_session=True, preexec_fn=cgroup.joiner() if cgroup else None,
                                **(user.popen() if user is not None else {}))
    return config.runtime.start(name, launch.image[0], msg, env, cwd, paths.root, user, out, err)


def _launched(launch: Launch, msg: TrialMessage, config: RunnerConfig, paths: Paths, user: TrialUser | None,
              name: str, out: BinaryIO, err: BinaryIO) -> tuple[subprocess.Popen[bytes], int | None]:
    """Spawn the process and take charge of it: (the process, the pid whose tree is sampled, None: its own).
    Raises :class:`_NotStarted` when it cannot start."""
    if config.reap_orphans:
        REAPER.adopt()  # orphans below the agent come to it, not to init: what a trial leaves is found (orphans.py)
    try:
        proc = _spawn(launch, msg, config, paths, user, name, out, err)
    except OSError as e:
        # A command that is not there or not runnable is the spec's (any submitter can name one);
        # a fork that fails (no memory, no processes left) is the node's.
        kind: Failure = "refused" if e.errno in _NOT_RUNNABLE else "agent"
        raise _NotStarted(kind, f"cannot start {msg.argv[0]!r}: {e.strerror or e}") from e
    REAPER.started(proc.pid)
    if launch.cgroup is not None:
        launch.cgroup.join(proc.pid)  # in case its own preexec_fn could not (its user may not write the file)
    runtime = config.runtime if launch.image is not None else None
    if runtime is None:
        return proc, None
    on_kill(proc.pid, lambda: runtime.kill(name))
    return proc, runtime.pid(name)  # the container's init: its tree is the trial's (the client is not)


def _pruned(store: ArtifactStore, msg: TrialMessage, streams: dict[str, tuple[Path, BinaryIO]], redelivered: bool,
            resume: int | None, send: Confirms) -> None:
    """A run the planner pruned is over for good: its logs stay, its checkpoints go."""
    uploads.logs(store, msg, streams, msg.limits.log_bytes)
    if not uploads.nothing_stored(msg, redelivered, resume, send.checkpoints):
        uploads.retain(store, msg, pruned=True)


def _verdict(outcome: Outcome, rc: int | None, err: BinaryIO, msg: TrialMessage, launch: Launch,
             runtime: container.Runtime | None, container_oom: bool) -> tuple[Result, Failure | None, str | None]:
    """:func:`_classify` with what the memory cgroup or the container runtime knows of the process's end."""
    container_oom = container_oom or (runtime is not None and container.oom_unsaid(msg, outcome.reason, rc))
    over = outcome.over_memory or container_oom or (launch.cgroup is not None and launch.cgroup.oom_killed())
    result, failure, error = _classify(outcome, rc, lambda: _tail_text(err), msg, over)
    if runtime is not None and failure == "exit":
        failure = runtime.failure(rc) or failure
    return result, failure, error


def _screened(outcome: Outcome, cut: str | None) -> dict[str, list[Any]]:
    """The final event's flags and warnings from the run's metric screen (a truncated log noted)."""
    screen = outcome.screen
    if screen is None:
        return {"flags": [], "warnings": []}
    if cut is not None:
        screen.note("log_truncated", cut)
    return {"flags": screen.flags(outcome.final), "warnings": screen.warnings()}


def _started(msg: TrialMessage, store: ArtifactStore, send: Confirms, config: RunnerConfig, control: RunControls,
             redelivered: bool, losses: int, run_id: str, paths: Paths, user: TrialUser | None, launch: Launch,
             resume: int | None, restored: dict[str, float], end: Callable[..., TrialFinished],
             staged: float | None = None) -> TrialFinished | None:
    """Start the process (in its memory cgroup or its container, when it has one), supervise it, upload its logs,
    classify its end."""
    ids = {"sweep_id": msg.sweep_id, "trial_id": msg.trial_id, "attempt": msg.attempt, "run_id": run_id}
    runtime = config.runtime if launch.image is not None else None
    name = f"spotsweep-{run_id}"
    with paths.stdout.open("w+b") as out, paths.stderr.open("w+b") as err:
        proc, sampled = _launched(launch, msg, config, paths, user, name, out, err)
        run_marks = marks(launch.env, TOKEN_VAR.encode(), b"SPOTSWEEP_RUN_ID")
        started = time.monotonic()
        start = TrialStarted(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, agent=config.agent_id,
                             run_id=run_id, resume_step=resume, redelivered=redelivered, losses=losses, staging=staged,
                             image=" ".join(launch.image) if launch.image is not None else None)
        streams: dict[str, tuple[Path, BinaryIO]] = {"stdout": (paths.stdout, out), "stderr": (paths.stderr, err)}
        own_limit = launch.cgroup is None and runtime is None  # else the cgroup's or the container's limit holds
        with LogShipper(store, msg, streams, config.log_upload_seconds):  # the store has the logs while the trial runs
            try:
                outcome = _supervised(proc, start, msg, store, send, config, control, paths, restored, run_marks,
                                      msg.memory if own_limit else None, sampled)
            finally:
                on_kill(proc.pid, None)
                container_oom = runtime is not None and runtime.finish(name)  # (docker's OOMKilled)
        duration = (outcome.ended or time.monotonic()) - started  # the process's time, not the uploads' after it
        if outcome.reason == "lost":
            raise DeliveryLost(run_id, round(duration, 3))
        if outcome.reason == "stopped":
            _log.info("run stopped by the planner", reason=outcome.stop_reason, **ids)
            if outcome.stop_reason == "pruned":
                _pruned(store, msg, streams, redelivered, resume, send)
            return None
        logs_uri, cut = uploads.logs(store, msg, streams, msg.limits.log_bytes)
        # A node going away spends its notice on the logs and the report, not on pruning (a few
        # requests behind what an abandoned upload still sends): the next attempt's commits and end prune.
        if not uploads.nothing_stored(msg, redelivered, resume, send.checkpoints) and not control.preempt.is_set():
            uploads.retain(store, msg)
        result, failure, error = _verdict(outcome, proc.returncode, err, msg, launch, runtime, container_oom)
    _log.info("trial ended", outcome=result, exit_code=proc.returncode, failure=failure, **ids)
    return end(result, exit_code=proc.returncode, error=error, failure=failure, metrics=outcome.final,
               last_step=outcome.last_step, logs_uri=logs_uri, duration=round(duration, 3), **_screened(outcome, cut))


def _supervised(proc: subprocess.Popen[bytes], start: TrialStarted, msg: TrialMessage, store: ArtifactStore,
                send: Confirms, config: RunnerConfig, control: RunControls, paths: Paths,
                restored: dict[str, float], run_marks: frozenset[bytes] = frozenset(),
                memory_limit: int | None = None, sampled: int | None = None) -> Outcome:
    """Announce the started process and supervise it to its end; its whole group is dead when this returns,
    and what left the group (``setsid``) is killed within moments (:mod:`.orphans`).
    Raises :class:`DeliveryLost` when a publish failed (the broker went away mid-trial)."""
    started = time.monotonic()
    try:
        WATCHDOG.add(proc.pid)  # start_new_session: the trial's pid is its process group's id
        # Sent at once, as its own message: the planner knows the run from its first instant.
        send(start)
        _log.info("trial started", pid=proc.pid, resume_step=start.resume_step, redelivered=start.redelivered,
                  sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, run_id=start.run_id)
        outcome = supervise(proc, msg, store, send, config, control, Tail(paths.metrics, msg.limits.line_bytes),
                            paths.checkpoint, start.run_id, restored, memory_limit, sampled)
        send.wait()  # the final event is published only after its points and checkpoints are confirmed
        return outcome
    except RetryableError as e:
        # This delivery is void and RabbitMQ hands the trial to another
        # agent, so the process must not run on unsupervised.
        killpg(proc.pid)
        raise DeliveryLost(start.run_id, round(time.monotonic() - started, 3)) from e
    except BaseException:
        killpg(proc.pid)  # the agent broke mid-trial: same
        raise
    finally:
        proc.wait()
        # The trial is over when its main process is: whatever it left
        # running in its group (data-loader workers, a forgotten
        # background job holding GPU memory) goes with it.
        killpg(proc.pid)
        WATCHDOG.discard(proc.pid)
        REAPER.ended(proc.pid, run_marks)  # and every process that left the group, carrying this run's marks


def _classify(outcome: Outcome, rc: int | None, stderr_tail: Callable[[], str],
              msg: TrialMessage, over_memory: bool = False) -> tuple[Result, Failure | None, str | None]:
    """(outcome, failure kind, error) of an attempt whose process has exited; ``stderr_tail``: the end of its stderr;
    ``over_memory``: its cgroup's OOM killer or the resource monitor killed a process of it."""
    if outcome.reason in ("preempted", "cancelled"):
        return outcome.reason, None, None  # type: ignore[return-value]
    if outcome.reason == "exited" and rc == 0:
        return "completed", None, None
    tail = stderr_tail()
    if over_memory and msg.memory is not None:
        # "oom": retries.on_oom applies to it as to a CUDA out-of-memory exit.
        why = f"exceeded its memory request ({human_bytes(msg.memory)}, resources.memory): killed"
        return "failed", "oom", f"{why}\n{tail}".rstrip()
    if outcome.reason == "stalled":
        why = f"stalled: no metric, checkpoint or heartbeat line for {msg.stall_timeout:g} s (timeout.stall); killed"
        return "failed", "stalled", f"{why}\n{tail}".rstrip()
    if outcome.reason == "timeout":
        why = f"timed out: ran {msg.total_timeout:g} s in all (timeout.total); killed"
        return "failed", "timeout", f"{why}\n{tail}".rstrip()
    error = tail or f"exit code {rc}"
    if rc is not None and rc < 0:
        error = f"killed by signal {-rc}\n{error}"
    failure: Failure = "oom" if any(m in tail for m in OOM_MARKERS) else "exit"
    return "failed", failure, error
