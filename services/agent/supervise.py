"""Watching one running trial process: its lines, the agent's signals, its time limits.

:func:`supervise` polls the process until it exits. On the way it turns the
metrics file into batched metric events, uploads each announced checkpoint
before publishing it, and stops the process when it must:

* hard stop (second SIGTERM to the agent) or a lost delivery: SIGKILL now;
* the planner stopped this run (a duplicate, or a trial that already ended),
  or its sweep was cancelled: SIGKILL now;
* no line for ``timeout.stall`` seconds, or past ``timeout.total``: SIGKILL;
* preemption (the node is going away): SIGTERM, then SIGKILL after the grace.

It returns why the process ended; :mod:`.runner` turns that into the
attempt's final event.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spotsweep.services.agent import uploads
from spotsweep.services.agent.lines import Checkpoint, Parsed, Points
from spotsweep.services.agent.screen import Screen
from spotsweep.services.agent.signals import killpg
from spotsweep.services.agent.tail import Item, Tail
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import CheckpointSaved, Envelope, TrialMessage, TrialMetrics, TrialProgress

_log = log.get("spotsweep.agent")


@dataclass
class RunControl:
    """Signals from the agent to a running trial, set from other threads."""

    preempt: threading.Event = field(default_factory=threading.Event)  # SIGTERM the trial, wait for grace
    kill: threading.Event = field(default_factory=threading.Event)  # SIGKILL now
    lost: threading.Event = field(default_factory=threading.Event)  # the delivery's connection died: SIGKILL, no report
    cancelled: Callable[[], bool] = lambda: False
    stopped: Callable[[str], str | None] = lambda run_id: None  # the planner's stop reason for a run, if any
    grace: float = 90.0


@dataclass(frozen=True)
class RunnerConfig:
    agent_id: str
    workdir: Path
    batch_points: int = 2000  # publish a metrics batch at this many points...
    batch_seconds: float = 0.25  # ...or when the oldest unsent point is this old
    poll_seconds: float = 0.05
    drain_seconds: float = 10.0  # reading what an exited trial left in its metrics file, at most


@dataclass
class Outcome:
    # exited | preempted | cancelled | stopped | stalled | timeout | lost
    reason: str = "exited"
    final: dict[str, float] = field(default_factory=dict)
    last_step: int | None = None
    stop_reason: str | None = None
    screen: Screen | None = None  # what the limits skipped (flags and warnings for the final event)


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


def supervise(
    proc: subprocess.Popen[bytes], msg: TrialMessage, store: ArtifactStore, publish: Callable[[Envelope], None],
    config: RunnerConfig, control: RunControl, tail: Tail, ckpt_dir: Path, run_id: str,
    restored: dict[str, float] | None = None,
) -> Outcome:
    """Supervise until the process exits. ``publish`` may publish without waiting
    (:class:`~.runner.Confirms`); its ``wait`` is called before each checkpoint commit."""
    confirm: Callable[[], None] = getattr(publish, "wait", lambda: None)
    # Final metrics start from what the checkpoint kept: a resumed run need
    # not re-report what was reported before it, even by a run that was lost.
    outcome = Outcome(final=dict(restored or {}))
    screen = outcome.screen = Screen(msg.limits, known=outcome.final, trial_id=msg.trial_id)
    batch: list[tuple[int, str, float]] = []  # (step, name, value) not yet published
    oldest = 0.0
    started = last_line = time.monotonic()
    term_sent_at: float | None = None
    # Running time left to this trial over all its attempts (timeout.total).
    budget = None if msg.total_timeout is None else msg.total_timeout - msg.elapsed

    def flush() -> None:
        nonlocal batch
        if batch:
            steps, names, values = (list(column) for column in zip(*batch))
            publish(TrialMetrics(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, steps=steps, names=names,
                                 values=values))
            objective = [(step, value) for step, name, value in batch if name == msg.metric]
            if msg.progress and objective:  # early stopping judges the objective while the trial runs
                publish(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, run_id=run_id,
                                      points=objective))
            batch = []

    pending: deque[Item] = deque()

    def take(parsed: Parsed) -> None:
        nonlocal oldest
        if isinstance(parsed, Points):
            if not batch:
                oldest = time.monotonic()
            batch.extend((parsed.step, k, v) for k, v in parsed.values.items())
            outcome.final.update(parsed.values)
            outcome.last_step = parsed.step
            if len(batch) >= config.batch_points:
                flush()

    def checkpoint(step: int) -> None:
        # The script may rewrite the directory as soon as it is complete
        # again, so a snapshot can hold a newer state than the line that
        # triggered it (when uploads lag behind training). Whatever it holds,
        # every point reported before it was written is in the file by the
        # time of the snapshot: read and publish them all before committing
        # it, so a resume from it never skips a point. Lines read meanwhile
        # that announce a newer checkpoint get a snapshot of their own.
        label: int | None = step
        while label is not None:
            staged = uploads.stage(ckpt_dir)
            pending.extend(tail.read())
            newer = None
            while pending:
                parsed = screen.admit(*pending.popleft())
                if isinstance(parsed, Checkpoint):
                    newer = parsed.step
                elif parsed is not None:
                    take(parsed)
            flush()
            confirm()  # the points the snapshot's state has passed are on the broker before it is committed
            uri = uploads.checkpoint(store, msg, label, staged, dict(outcome.final))
            if uri is not None:
                publish(CheckpointSaved(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, step=label,
                                        uri=uri))
            label = newer

    def consume(lines: list[Item]) -> None:
        pending.extend(lines)
        while pending:
            parsed = screen.admit(*pending.popleft())
            if isinstance(parsed, Checkpoint):
                checkpoint(parsed.step)
            elif parsed is not None:
                take(parsed)

    def end(reason: str) -> None:
        outcome.reason = reason
        killpg(proc.pid)

    wait = ExitWait(proc.pid)
    try:
        while True:
            exited = proc.poll() is not None
            lines = tail.read(final=exited)
            consume(lines)
            now = time.monotonic()
            if lines:
                last_line = now  # any line is a sign of life, and an upload may have taken a while
            if batch and now - oldest >= config.batch_seconds:
                flush()
            if exited:
                break
            if control.kill.is_set():
                killpg(proc.pid)
            elif control.lost.is_set():
                if outcome.reason != "lost":
                    end("lost")
            elif outcome.reason in ("exited", "preempted"):
                stop = control.stopped(run_id)
                if stop is not None:
                    outcome.stop_reason = stop
                    end("stopped")
                elif control.cancelled():
                    end("cancelled")
                elif outcome.reason == "exited" and msg.stall_timeout is not None and now - last_line > msg.stall_timeout:
                    end("stalled")
                elif outcome.reason == "exited" and budget is not None and now - started > budget:
                    end("timeout")
                elif control.preempt.is_set():
                    if term_sent_at is None:
                        outcome.reason = "preempted"
                        term_sent_at = now
                        killpg(proc.pid, signal.SIGTERM)
                    elif now - term_sent_at > control.grace:
                        killpg(proc.pid)
            wait(0 if tail.behind else config.poll_seconds)  # behind: read on at once, still minding the limits above
    finally:
        wait.close()
    proc.wait()
    drain(tail, consume, config.drain_seconds, screen)
    flush()
    if tail.refused is not None:
        screen.note("metrics_refused", tail.refused)
    return outcome


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
