"""Watching one running trial process: its lines, the agent's signals, its time limits.

:func:`supervise` polls the process until it exits: each poll the new lines of the metrics
file go to a :class:`~.committer.LineReader`, and the pure :func:`~.stop_policy.decide` says
whether to SIGTERM or SIGKILL the trial's process group. It returns why the process ended.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from spotsweep.services.agent.cgroup import Hierarchy
from spotsweep.services.agent.committer import DrainClock, LineReader, MetricPump
from spotsweep.services.agent.container import Runtime
from spotsweep.services.agent.hold import HOLD
from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.monitor import RunMonitor
from spotsweep.services.agent.screen import Screen
from spotsweep.services.agent.signals import killpg
from spotsweep.services.agent.stop_policy import Action, Limits, StopState, decide
from spotsweep.services.agent.tail import Item, Tail
from spotsweep.services.agent.unpack import DEFAULT_CAPS, Caps
from spotsweep.services.agent.url_policy import Policy
from spotsweep.shared import log
from spotsweep.shared.settings import Settings, default
from spotsweep.services.agent.trial_user import UserPool
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import Envelope, TrialMessage

_log = log.get("spotsweep.agent")


@dataclass(frozen=True)
class RunnerConfig:
    agent_id: str
    workdir: Path
    batch_points: int = 2000  # publish a metrics batch at this many points...
    batch_seconds: float = 0.25  # ...or when the oldest unsent point is this old
    poll_seconds: float = 0.05
    drain_seconds: float = 10.0  # reading what an exited trial left in its metrics file, at most
    sample_seconds: float = 5.0  # between resource samples of a running trial (sys/ metrics; 1 to 5)
    log_upload_seconds: float = default(Settings, "log_upload_seconds")  # between uploads of a running trial's logs
    code_dir: Path | None = None  # local mode: trials without a code archive run in this folder (the workdir) in place
    code_caps: Caps = DEFAULT_CAPS  # what a code archive may unpack to (unpack.py)
    input_cache_bytes: int = 50 * 2**30  # --input-cache-size: staged inputs kept past their use (inputs.py)
    url_policy: Policy = Policy()  # URL inputs: --allow-input-hosts, --max-input-bytes, ... (url_policy.py)
    input_paths: tuple[str, ...] = ()  # --input-paths: the folders node-path inputs may name (inputs.node_path)
    # Be the child subreaper of the trials and kill what they leave outside their groups (orphans.py): the agent
    # service sets it; off elsewhere, since it changes where every orphan of the process goes (a test runner's too).
    reap_orphans: bool = False
    trial_users: UserPool | None = None  # --trial-user: trials run as these users (trial_user.py)
    trial_env_pass: tuple[str, ...] = ()  # more of the agent's variables trials get (trial_env.py)
    trial_env_deny: tuple[str, ...] = ()  # variables trials never get, besides the built-in secrets
    pip_envs_bytes: int = 20 * 2**30  # setup.pip envs kept on the node, least recently used evicted past it (pyenv.py)
    # Where each trial with resources.memory gets its own memory cgroup (cgroup.py); None: the resource
    # monitor kills a trial whose tree's resident memory is over its request (monitor.py).
    cgroups: Hierarchy | None = None
    runtime: Runtime | None = None  # --runtime docker|podman: each trial runs in a container (container.py); None: a process


@dataclass
class Outcome:
    # exited | preempted | cancelled | stopped | stalled | timeout | lost
    reason: str = "exited"
    final: dict[str, float] = field(default_factory=dict)
    last_step: int | None = None
    stop_reason: str | None = None
    screen: Screen | None = None  # what the limits skipped (flags and warnings for the final event)
    ended: float | None = None  # time.monotonic() when the process exited (the agent's uploads after it are not its time)
    over_memory: bool = False  # the resource monitor killed it over its memory request


class ExitWait:
    """Sleep until the next poll, or until the process exits, whichever is first.

    A trial that ends between two polls would otherwise idle its slot for the
    rest of the interval (most of a short trial's life). Linux's pidfd is
    readable once the process exits; elsewhere this is a plain sleep.
    """

    def __init__(self, pid: int) -> None:
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._fd = None

    def __call__(self, seconds: float) -> None:
        if self._fd is None:
            time.sleep(seconds)
        else:
            select.select([self._fd], [], [], seconds)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ExitClock:
    """When the process exited, to the instant, though the supervisor may be busy uploading then.

    A thread waits in ``waitid(..., WNOWAIT)``, which returns at the exit and
    leaves the process for ``Popen`` to reap. The trial's time (``duration``,
    what ``timeout.total`` adds up) ends there: a checkpoint of 20,000 files
    the agent uploads after the exit is the agent's work, not the trial's."""

    def __init__(self, pid: int) -> None:
        self._at: float | None = None
        self._thread = threading.Thread(target=self._wait, args=(pid,), name=f"exit-{pid}", daemon=True)
        self._thread.start()

    def _wait(self, pid: int) -> None:
        with suppress(ChildProcessError, OSError):  # reaped already: it has exited by now
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        self._at = time.monotonic()

    def at(self) -> float:
        """The exit's time; call it once the process has been reaped."""
        self._thread.join(1.0)
        return self._at if self._at is not None else time.monotonic()


def _act(proc: subprocess.Popen[bytes], action: Action) -> None:
    if action == "kill":
        killpg(proc.pid)
    elif action == "term":
        killpg(proc.pid, signal.SIGTERM)


def supervise(
    proc: subprocess.Popen[bytes], msg: TrialMessage, store: ArtifactStore, publish: Callable[[Envelope], None],
    config: RunnerConfig, control: RunControls, tail: Tail, ckpt_dir: Path, run_id: str,
    restored: dict[str, float] | None = None, memory_limit: int | None = None, sampled: int | None = None,
) -> Outcome:
    """Supervise until the process exits. ``publish`` may publish without waiting
    (:class:`~.runner.Confirms`); its ``wait`` is called before each checkpoint commit. ``memory_limit``:
    bytes the process tree may hold before the resource monitor kills it (where no cgroup does); ``sampled``: the
    process whose tree the resource samples read, when not ``proc`` (a container's init, not its client)."""
    confirm: Callable[[], None] = getattr(publish, "wait", lambda: None)
    pump = MetricPump(msg, run_id, publish, config.batch_points, config.batch_seconds, restored)
    screen = Screen(msg.limits, known=pump.final, trial_id=msg.trial_id)
    drain_clock = DrainClock(control, control.grace)  # an upload in flight at a preemption: until the grace, no longer
    held = HOLD.mark()  # a run whose hold lapsed commits no checkpoint: its attempt may run elsewhere (hold.py)
    reader = LineReader(msg, tail, screen, pump, store, ckpt_dir, publish, confirm,
                        lambda: drain_clock.out_of_time() or not HOLD.held(held))
    monitor = RunMonitor(msg, run_id, sampled or proc.pid, publish, pump.take_samples, config.sample_seconds,
                         memory_limit=memory_limit)
    pump.watch = monitor.points
    # Running time left to this trial over all its attempts (timeout.total).
    budget = None if msg.total_timeout is None else msg.total_timeout - msg.elapsed
    limits = Limits(stall=msg.stall_timeout, budget=budget, grace=control.grace)
    now = time.monotonic()
    state = StopState(started=now, last_line=now)
    wait = ExitWait(proc.pid)
    ended = ExitClock(proc.pid)
    try:
        while True:
            exited = proc.poll() is not None
            lines = tail.read(final=exited)
            reader.consume(lines)
            now = time.monotonic()
            if lines:  # any line is a sign of life, and an upload may have taken a while
                state = replace(state, last_line=now)
            if not exited:
                monitor.poll(now - state.last_line)
            pump.flush_if_due(now)
            if exited:
                break
            if proc.poll() is not None:
                continue  # it exited while the agent uploaded: read the rest; the agent's time is not the trial's
            state, action = decide(state, control.signals(run_id), now, limits)
            if action == "term" and (seen := drain_clock.since()) is not None:
                state = replace(state, term_sent_at=min(now, seen))  # the grace began when the drain did, mid-upload or not
            _act(proc, action)
            wait(0 if tail.behind else config.poll_seconds)  # behind: read on at once, still minding the limits above
    finally:
        wait.close()
    proc.wait()
    drain(tail, reader.consume, config.drain_seconds, screen)
    pump.flush()
    monitor.finish(screen)
    if tail.refused is not None:
        screen.note("metrics_refused", tail.refused)
    return Outcome(reason=state.reason, final=pump.final, last_step=pump.last_step, stop_reason=state.stop_reason,
                   screen=screen, ended=ended.at(), over_memory=monitor.over_memory)


def drain(tail: Tail, consume: Callable[[list[Item]], None], seconds: float, screen: Screen) -> None:
    """Read the rest of an exited trial's metrics file, for at most ``seconds``:
    a trial may leave far more behind than the agent can read in that time."""
    deadline = time.monotonic() + seconds
    while tail.behind:
        if time.monotonic() > deadline:
            screen.note("metrics_unread", f"the metrics file was read for {seconds:g} s after the trial exited and "
                                          f"not past byte {tail.offset}: the rest was dropped")
            return
        consume(tail.read(final=True))
