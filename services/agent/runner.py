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

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any, BinaryIO

from spotsweep.services.agent import code_cache, container, inputs, inputs_url, pyenv, uploads, workspace
from spotsweep.services.agent.container import ImageUnavailable
from spotsweep.services.agent.hold import HOLD, LAPSED
from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.launch import REAPER, WATCHDOG, Launch, NotStarted, environment, kill_all, launched
from spotsweep.services.agent.log_shipper import LogShipper
from spotsweep.services.agent.orphans import marks
from spotsweep.services.agent.signals import killpg, on_kill
from spotsweep.services.agent.supervise import Outcome, RunnerConfig, supervise
from spotsweep.services.agent.tail import Tail
from spotsweep.services.agent.trial_user import TrialUser, chown_tree
from spotsweep.services.agent.verdict import screened, verdict
from spotsweep.services.agent.watchdog import TOKEN_VAR
from spotsweep.services.agent.workspace import Paths
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.messages import CheckpointSaved, Envelope, Outcome as Result, TrialFinished, TrialMessage, TrialStaging, TrialStarted

__all__ = ["DeliveryLost", "RunControls", "RunnerConfig", "kill_all", "run_trial"]

_log = log.get("spotsweep.agent")


class DeliveryLost(RetryableError):
    """The delivery died with its channel or connection; the process was killed and the broker hands the attempt out again."""

    def __init__(self, run_id: str, duration: float | None = None) -> None:
        super().__init__("the broker connection was lost: the trial was stopped and will be redelivered")
        self.run_id = run_id
        self.duration = duration  # seconds the process ran: timeout.total counts lost runs too


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
        raise NotStarted("refused", f"{what}, so the attempt did not start: {e}") from e


def _image(msg: TrialMessage, config: RunnerConfig) -> tuple[str, str] | None:
    """The trial's (image, id) under a container runtime, pulled; None in process mode."""
    try:
        return container.image_for(msg, config.runtime)
    except ImageUnavailable as e:
        raise NotStarted("image", str(e)) from e
    except PermanentError as e:
        raise NotStarted("refused", str(e)) from e


def _stage(msg: TrialMessage, store: ArtifactStore, config: RunnerConfig, paths: Paths, cwd: Path,
           user: TrialUser | None, held: ExitStack, guard: inputs_url.Guard) -> float | None:
    """Link the trial's inputs into its folder (held until the run ends); the seconds that took, None
    without inputs. Staged before the process starts: not the trial's running time (that starts at Popen)."""
    if not msg.inputs:
        return None
    began = time.monotonic()
    with _refusing("the trial's inputs cannot be staged"):
        if cwd != paths.run:
            raise PermanentError("inputs are linked into a run's own folder; this one runs in its workdir in place")
        held.enter_context(inputs.staged(msg, store, config.workdir / "inputs", cwd, config.input_cache_bytes, user,
                                         config.input_paths, guard=guard))
    return round(time.monotonic() - began, 3)


def _venv(msg: TrialMessage, config: RunnerConfig, cwd: Path, user: TrialUser | None, held: ExitStack) -> Path | None:
    """setup.pip's virtualenv, held (shared) until the run ends: no eviction while the trial runs in it."""
    if msg.setup_pip is None:
        return None
    try:
        return held.enter_context(pyenv.lease(config.workdir / "pyenvs", cwd / msg.setup_pip, cwd,
                                              config.pip_envs_bytes, no_build=user is not None, user=user))
    except pyenv.NoInstaller as e:
        raise NotStarted("agent", str(e)) from e
    except (PermanentError, OSError) as e:
        raise NotStarted("refused", f"setup.pip: the trial's environment cannot be built from {msg.setup_pip!r}, "
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
        staged = _stage(msg, store, config, paths, cwd, user, held, inputs_url.Guard.for_run(config.url_policy,
                                                                                             control, run_id))
        venv = _venv(msg, config, cwd, user, held)
        env = environment(msg, paths.metrics, paths.checkpoint, resume, gpu, config, user, run_id, venv)
        if msg.memory is not None and config.cgroups is not None and image is None:  # a container has the runtime's
            cgroup = config.cgroups.make(run_id, msg.memory, user.uid if user is not None else None)
        return _started(msg, store, send, config, control, redelivered, losses, run_id, paths, user,
                        Launch(env, cwd, venv, cgroup, image), resume, restored, end, staged)
    except NotStarted as e:
        return end("failed", failure=e.failure, error=str(e))
    except inputs_url.Aborted as e:  # the run ended while a URL input downloaded: as it would have running
        if e.reason == "lost":
            raise DeliveryLost(run_id) from e
        return None if e.reason == "stopped" else end("cancelled", error=str(e))
    finally:
        if cgroup is not None:
            cgroup.remove()


def _pruned(store: ArtifactStore, msg: TrialMessage, streams: dict[str, tuple[Path, BinaryIO]], redelivered: bool,
            resume: int | None, send: Confirms) -> None:
    """A run the planner pruned is over for good: its logs stay, its checkpoints go."""
    uploads.logs(store, msg, streams, msg.limits.log_bytes)
    if not uploads.nothing_stored(msg, redelivered, resume, send.checkpoints):
        uploads.retain(store, msg, pruned=True)


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
        proc, sampled = launched(launch, msg, config, paths, user, name, out, err)
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
                exited = runtime.finish(name) if runtime is not None else None  # (docker's OOMKilled, StartedAt)
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
        result, failure, error = verdict(outcome, proc.returncode, err, msg, launch, runtime, exited)
    _log.info("trial ended", outcome=result, exit_code=proc.returncode, failure=failure, **ids)
    return end(result, exit_code=proc.returncode, error=error, failure=failure, metrics=outcome.final,
               last_step=outcome.last_step, logs_uri=logs_uri, duration=round(duration, 3), **screened(outcome, cut))


def _supervised(proc: subprocess.Popen[bytes], start: TrialStarted, msg: TrialMessage, store: ArtifactStore,
                send: Confirms, config: RunnerConfig, control: RunControls, paths: Paths,
                restored: dict[str, float], run_marks: frozenset[bytes] = frozenset(),
                memory_limit: int | None = None, sampled: int | None = None) -> Outcome:
    """Announce the started process and supervise it to its end; its whole group is dead when this returns,
    and what left the group (``setsid``) is killed within moments (:mod:`.orphans`).
    Raises :class:`DeliveryLost` when a publish failed (the broker went away mid-trial)."""
    started, held = time.monotonic(), HOLD.mark()
    try:
        WATCHDOG.add(proc.pid)  # start_new_session: the trial's pid is its process group's id
        # Sent at once, as its own message: the planner knows the run from its first instant.
        send(start)
        _log.info("trial started", pid=proc.pid, resume_step=start.resume_step, redelivered=start.redelivered,
                  sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, run_id=start.run_id)
        outcome = supervise(proc, msg, store, send, config, control, Tail(paths.metrics, msg.limits.line_bytes),
                            paths.checkpoint, start.run_id, restored, memory_limit, sampled)
        if not HOLD.held(held):  # the watchdog killed it (the agent was frozen): its delivery is void (hold.py)
            raise RetryableError(LAPSED)
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

