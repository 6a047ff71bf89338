"""Run one attempt of one trial as a child process, under the process contract.

The runner restores the latest checkpoint, starts the command (never through
a shell) in a fresh working directory and its own process group, tails the
metrics file, publishes metric batches and checkpoint events, uploads
checkpoints and logs, and returns the attempt's final event. It blocks its
worker thread for the trial's whole life; the broker's I/O thread is never
involved, so heartbeats flow during multi-hour trials.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotsweep.services.agent.lines import BadLine, Checkpoint, Points, Tail, parse_line
from spotsweep.shared import log
from spotsweep.services.agent import uploads
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import (
    CheckpointSaved, Envelope, MetricPoint, Outcome, TrialFinished, TrialMessage, TrialMetrics, TrialStarted,
)

_log = log.get("spotsweep.agent")
ERROR_TAIL_LINES = 20


@dataclass
class RunControl:
    """Signals from the agent to a running trial, set from other threads."""

    preempt: threading.Event = field(default_factory=threading.Event)  # SIGTERM the trial, wait for grace
    kill: threading.Event = field(default_factory=threading.Event)  # SIGKILL now
    lost: threading.Event = field(default_factory=threading.Event)  # the delivery's connection died: SIGKILL, no report
    cancelled: Callable[[], bool] = lambda: False
    grace: float = 90.0


@dataclass(frozen=True)
class RunnerConfig:
    agent_id: str
    workdir: Path
    batch_points: int = 2000  # publish a metrics batch at this many points...
    batch_seconds: float = 0.25  # ...or when the oldest unsent point is this old
    poll_seconds: float = 0.05


def _argv(argv: list[str]) -> list[str]:
    # "python" in a spec means the agent's own interpreter, so a sweep runs in
    # the environment spotsweep is installed in, with or without an activated venv.
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return list(argv)


def _tail_text(path: Path, lines: int = ERROR_TAIL_LINES, limit: int = 4000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])[-limit:]


_running: set[int] = set()  # process groups of live trials, for kill_all
_running_lock = threading.Lock()


def kill_all() -> None:
    """SIGKILL every live trial's process group (hard stop, before exiting)."""
    with _running_lock:
        groups = list(_running)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_trial(
    msg: TrialMessage,
    store: ArtifactStore,
    publish: Callable[[Envelope], None],
    config: RunnerConfig,
    control: RunControl,
    gpu: str | None = None,
) -> TrialFinished:
    """Run the attempt to its end and return (not publish) its final event."""
    ids = {"sweep_id": msg.sweep_id, "trial_id": msg.trial_id, "attempt": msg.attempt}
    config.workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{msg.trial_id}-a{msg.attempt}-", dir=config.workdir))
    run_dir, ckpt_dir = root / "run", root / "checkpoint"
    run_dir.mkdir()
    ckpt_dir.mkdir()
    metrics_path, out_path, err_path = root / "metrics.jsonl", root / "stdout.log", root / "stderr.log"
    metrics_path.touch()

    def end(outcome: Outcome, **fields: Any) -> TrialFinished:
        return TrialFinished(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, agent=config.agent_id,
                             outcome=outcome, **fields)

    try:
        resume = uploads.restore(store, msg, ckpt_dir)
        env = {**os.environ, **msg.env}
        env.update(
            SPOTSWEEP_PARAMS=_json(msg.params), SPOTSWEEP_SWEEP_ID=msg.sweep_id, SPOTSWEEP_TRIAL_ID=msg.trial_id,
            SPOTSWEEP_TRIAL_NAME=msg.trial_name, SPOTSWEEP_ATTEMPT=str(msg.attempt),
            SPOTSWEEP_METRICS=str(metrics_path), SPOTSWEEP_CHECKPOINT_DIR=str(ckpt_dir),
            PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        )
        env.pop("SPOTSWEEP_RESUME_STEP", None)
        if resume is not None:
            env["SPOTSWEEP_RESUME_STEP"] = str(resume)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                proc = subprocess.Popen(_argv(msg.argv), cwd=run_dir, env=env, stdout=out, stderr=err, start_new_session=True)
            except OSError as e:
                return end("failed", error=f"cannot start {msg.argv[0]!r}: {e.strerror or e}")
            with _running_lock:
                _running.add(proc.pid)
            try:
                publish(TrialStarted(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                     agent=config.agent_id, resume_step=resume))
                _log.info("trial started", pid=proc.pid, resume_step=resume, **ids)
                outcome = _supervise(proc, msg, store, publish, config, control, Tail(metrics_path), ckpt_dir)
            except BaseException:
                # The broker went away (or the agent broke) mid-trial: this
                # delivery is void and RabbitMQ hands the trial to another
                # agent, so the process must not run on unsupervised.
                _signal_group(proc, signal.SIGKILL)
                raise
            finally:
                proc.wait()
                with _running_lock:
                    _running.discard(proc.pid)
        if outcome.reason == "lost":
            raise RetryableError("the broker connection was lost: the trial was stopped and will be redelivered")
        final, last_step = outcome.final, outcome.last_step
        logs_uri = uploads.logs(store, msg, out_path, err_path)
        rc = proc.returncode
        result: Outcome
        if outcome.reason == "preempted":
            result = "preempted"
        elif outcome.reason == "cancelled":
            result = "cancelled"
        else:
            result = "completed" if rc == 0 else "failed"
        error = None
        if result == "failed":
            error = _tail_text(err_path) or f"exit code {rc}"
            if rc is not None and rc < 0:
                error = f"killed by signal {-rc}\n{error}"
        _log.info("trial ended", outcome=result, exit_code=rc, **ids)
        return end(result, exit_code=rc, error=error, metrics=final, last_step=last_step, logs_uri=logs_uri)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class _Outcome:
    reason: str = "exited"
    final: dict[str, float] = field(default_factory=dict)
    last_step: int | None = None


def _supervise(
    proc: subprocess.Popen[bytes], msg: TrialMessage, store: ArtifactStore, publish: Callable[[Envelope], None],
    config: RunnerConfig, control: RunControl, tail: Tail, ckpt_dir: Path,
) -> _Outcome:
    outcome = _Outcome()
    batch: list[MetricPoint] = []
    oldest = 0.0
    term_sent_at: float | None = None

    def flush() -> None:
        nonlocal batch
        if batch:
            publish(TrialMetrics(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, points=batch))
            batch = []

    def consume(lines: list[str]) -> None:
        nonlocal oldest
        for line in lines:
            parsed = parse_line(line)
            if isinstance(parsed, Points):
                if not batch:
                    oldest = time.monotonic()
                batch.extend(MetricPoint(step=parsed.step, name=k, value=v) for k, v in parsed.values.items())
                outcome.final.update(parsed.values)
                outcome.last_step = parsed.step
            elif isinstance(parsed, Checkpoint):
                flush()  # points up to the checkpoint land before it
                uri = uploads.checkpoint(store, msg, parsed.step, ckpt_dir)
                if uri is not None:
                    publish(CheckpointSaved(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                            step=parsed.step, uri=uri))
            elif isinstance(parsed, BadLine):
                _log.warning("bad metrics line skipped", reason=parsed.reason, line=parsed.line[:200], trial_id=msg.trial_id)
            if len(batch) >= config.batch_points:
                flush()

    while True:
        exited = proc.poll() is not None
        consume(tail.read(final=exited))
        if batch and time.monotonic() - oldest >= config.batch_seconds:
            flush()
        if exited:
            break
        if control.kill.is_set():
            _signal_group(proc, signal.SIGKILL)
        elif control.lost.is_set() and outcome.reason != "lost":
            outcome.reason = "lost"
            _signal_group(proc, signal.SIGKILL)
        elif control.cancelled() and outcome.reason != "cancelled":
            outcome.reason = "cancelled"
            _signal_group(proc, signal.SIGKILL)
        elif control.preempt.is_set():
            if term_sent_at is None:
                outcome.reason = "preempted"
                term_sent_at = time.monotonic()
                _signal_group(proc, signal.SIGTERM)
            elif time.monotonic() - term_sent_at > control.grace:
                _signal_group(proc, signal.SIGKILL)
        time.sleep(config.poll_seconds)
    proc.wait()
    flush()
    return outcome


def _json(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))
