"""How an attempt whose process has exited ended: its outcome, failure kind and error (pure but for reading the
end of its stderr and asking its memory cgroup or container runtime), and its final event's flags and warnings."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any, BinaryIO

from spotsweep.services.agent import container
from spotsweep.services.agent.launch import Launch
from spotsweep.services.agent.supervise import Outcome
from spotsweep.shared.messages import Failure, Outcome as Result, TrialMessage
from spotsweep.shared.quantity import human_bytes

ERROR_TAIL_LINES = 20
PROBE_SECONDS = 60.0  # a probe container that has not ended by then: the runtime is hung
# What a CUDA out-of-memory exit leaves on stderr (torch's error text and the
# allocator failures that come with it), for retries.on_oom.
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "HIP out of memory")


def _tail_text(f: BinaryIO, lines: int = ERROR_TAIL_LINES, limit: int = 4000) -> str:
    """The last lines of a log, read from the agent's own descriptor (never the
    path, which the trial may have swapped for a FIFO)."""
    size = os.fstat(f.fileno()).st_size
    text = os.pread(f.fileno(), 64 * 1024, max(0, size - 64 * 1024)).decode("utf-8", "replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])[-limit:]


def verdict(outcome: Outcome, rc: int | None, err: BinaryIO, msg: TrialMessage, launch: Launch,
            runtime: container.Runtime | None,
            exited: container.Exited | None = None) -> tuple[Result, Failure | None, str | None]:
    """:func:`classify` with what the memory cgroup or the container runtime knows of the process's end. A
    container's exit code is the trial's when the runtime says its process started (125 included); else the
    runtime did not start it, and a probe container (:func:`runtime_broken`) tells the node's fault from the spec's."""
    over = outcome.over_memory or (exited is not None and exited.oom) or (
        launch.cgroup is not None and launch.cgroup.oom_killed())
    result, failure, error = classify(outcome, rc, lambda: _tail_text(err), msg, over, runtime is not None)
    if runtime is None or failure != "exit":
        return result, failure, error
    if exited is not None and not exited.started and launch.image is not None:
        broken = runtime_broken(runtime, launch.image[1], launch.env.get(b"CUDA_VISIBLE_DEVICES"))
        if broken is not None:  # the agent's own observation: node evidence (health.py)
            return "failed", "agent", f"the container runtime cannot start containers here: {broken}\n{error}"
        # The trial never ran, so the stream is the runtime's own: a request of this trial's it would not start.
        return "failed", "refused", f"the container runtime did not start the trial's container (exit {rc}; a probe " \
                                    f"container starts here):\n{error}"
    return result, runtime.failure(rc) or failure, error


def runtime_broken(runtime: container.Runtime, image_id: str, gpus: bytes | None) -> str | None:
    """Why a known-good container cannot start here (the trial's image, the slot's GPUs, nothing of the spec's), or
    None when it starts: its entrypoint does not exist, so the runtime started it when the exit is not 125."""
    argv = [runtime.binary, "run", "--rm", "--init", "--network", "none", "--cap-drop", "ALL", "--security-opt",
            "no-new-privileges", "--entrypoint", "/.spotsweep-probe",
            *runtime._gpus(gpus.decode() if gpus else None), image_id]  # noqa: SLF001 - the slot's devices as a trial's
    try:
        probe = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"a probe container did not end within {PROBE_SECONDS:g} s"
    if probe.returncode != 125:
        return None
    why = (probe.stderr.strip().splitlines() or ["no reason given"])[-1]
    return f"a probe container failed to start (exit 125): {why[:300]}"


def screened(outcome: Outcome, cut: str | None) -> dict[str, list[Any]]:
    """The final event's flags and warnings from the run's metric screen (a truncated log noted)."""
    screen = outcome.screen
    if screen is None:
        return {"flags": [], "warnings": []}
    if cut is not None:
        screen.note("log_truncated", cut)
    return {"flags": screen.flags(outcome.final), "warnings": screen.warnings()}


def classify(outcome: Outcome, rc: int | None, stderr_tail: Callable[[], str],
             msg: TrialMessage, over_memory: bool = False,
             in_container: bool = False) -> tuple[Result, Failure | None, str | None]:
    """(outcome, failure kind, error) of an attempt whose process has exited; ``stderr_tail``: the end of its stderr;
    ``over_memory``: its cgroup's OOM killer or the resource monitor killed a process of it (the only evidence of an
    OOM kill, with the trial's own CUDA OOM text); ``in_container``: ``rc`` is the runtime client's (137: SIGKILL).
    A SIGKILL the agent did not send, without that evidence, is ``killed``: a crash, retried as one."""
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
    if failure == "exit" and outcome.reason == "exited" and rc == (128 + 9 if in_container else -9):
        why = "killed by signal 9, not by the agent, with no sign of an out-of-memory kill (docker kill, kill -9, the host's OOM killer)"
        return "failed", "killed", f"{why}\n{tail}".rstrip()
    return "failed", failure, error
