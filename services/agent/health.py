"""Is this node broken? A circuit breaker over the failures an agent saw.

A node with a dead GPU, a full disk or a broken driver fails every trial it
touches, in seconds, and would burn through a whole sweep's retry budget
while healthy nodes wait. A sweep with a bug fails every trial too, on every
node: that is the sweep's fault, and its own breaker stops it (the planner's
:mod:`~spotsweep.services.planner.breaker`). So this one counts only
failures with evidence against the node (:func:`node_evidence`):

* the agent's own errors (``failure="agent"``: it broke running the trial);
* the known node causes in the failure's error text: a CUDA, NVML or NCCL
  device error (ECC, Xid, no CUDA-capable device, a GPU off the bus, a
  driver mismatch; not the errors a trial's own code causes, such as an
  illegal memory access, a device-side assert or running out of memory), a
  disk full ("No space left on device", ENOSPC) naming one of the agent's
  own paths, a container runtime that is missing or broken.

Never an ordinary non-zero exit, a CUDA out-of-memory, a timeout, a lost
attempt, nor a refusal of bad input (``failure="refused"``: a refused code
archive, a command that cannot be started): those say nothing about the
node, and any submitter can cause them. A failure without evidence neither
counts nor clears the streak.

The breaker trips when the evidence since the last success comes from at
least ``limit`` different trials (one bad trial retried here is the trial's
fault) of at least two sweeps (one sweep whose code makes the driver fail
everywhere is that sweep's). Any completed attempt resets it; preemptions
and cancellations say nothing about the node.

A trip lasts ``cooldown`` seconds, not forever: a node that was only
unlucky takes trials again afterwards. The streak is kept across the
cooldown, so on a node that is still broken the next failure with evidence
trips it again at once (a half-open breaker), and only a success clears it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spotsweep.shared.messages import TrialFinished

MIN_SWEEPS = 2  # a streak within one sweep blames the sweep, not the node
DEFAULT_COOLDOWN_S = 600.0
# Failure kinds whose error text may hold a node cause ("oom" is the trial's
# memory, "timeout" its budget, "lost" says nothing here, "refused" its input).
_READ = frozenset({"exit", "stalled"})
_GPU = re.compile(r"CUDA error|CUDA_ERROR|cudaError|no CUDA-capable device|CUDA driver version is insufficient|"
                  r"\bNVML\b|NCCL error|\bECC\b|\bXid\b|fallen off the bus|GPU is lost", re.IGNORECASE)
# CUDA errors the trial's own code causes (the same on every node): not evidence.
_CODE = re.compile(r"out of memory|illegal memory access|device-side assert|invalid argument|invalid configuration|"
                   r"invalid device (ordinal|function)|misaligned address|illegal instruction|no kernel image|"
                   r"invalid usage|not supported", re.IGNORECASE)
_DISK = re.compile(r"No space left on device|ENOSPC|\[Errno 28\]", re.IGNORECASE)
_RUNTIME = re.compile(r"nvidia-container-cli|OCI runtime|container runtime|Cannot connect to the Docker daemon",
                      re.IGNORECASE)
_SCAN_LINES = 200  # the end of the error text is read, not all of it


def node_evidence(final: TrialFinished, own_paths: Sequence[str] = ()) -> str | None:
    """The line of ``final`` that blames the node (or ``agent error: ...``); None when it says nothing about it.
    ``own_paths``: the agent's folders, where a full disk is the node's (absolute, as a trial would print them)."""
    if final.outcome != "failed":
        return None
    text = final.error if isinstance(final.error, str) else ""
    if final.failure == "agent":
        return _first_line(text) or "agent error"
    if final.failure not in _READ:
        return None
    for line in text.splitlines()[-_SCAN_LINES:]:
        if _GPU.search(line) and not _CODE.search(line):
            return line.strip()[:200]
        if _DISK.search(line) and any(p and p in line for p in own_paths):
            return line.strip()[:200]
        if _RUNTIME.search(line):
            return line.strip()[:200]
    return None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


@dataclass
class Health:
    limit: int = 5  # 0 disables the breaker
    cooldown: float = DEFAULT_COOLDOWN_S  # seconds a trip keeps the agent from taking trials
    clock: Callable[[], float] = time.monotonic
    own_paths: tuple[str, ...] = ()  # the agent's folders: a full disk there is the node's (node_evidence)
    # (sweep_id, trial_id, the evidence) of each failure that blamed the node since the last success
    streak: list[tuple[str, str, str]] = field(default_factory=list)
    _until: float | None = field(default=None, repr=False)  # when the current trip ends
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def tripped(self) -> bool:
        """True while a trip's cooldown runs."""
        return self.remaining() > 0

    def remaining(self) -> float:
        """Seconds left of the current trip's cooldown (0 when not tripped)."""
        with self._lock:
            return 0.0 if self._until is None else max(0.0, self._until - self.clock())

    def record(self, final: TrialFinished) -> bool:
        """Account for one ended attempt; True exactly when this one trips the breaker."""
        with self._lock:
            if final.outcome == "completed":
                self.streak.clear()
                return False
            if self.limit <= 0:
                return False
            evidence = node_evidence(final, self.own_paths)
            if evidence is None:
                return False
            self.streak.append((final.sweep_id, final.trial_id, evidence))
            del self.streak[:-max(100, 4 * self.limit)]  # a node broken for days must not grow this forever
            now = self.clock()
            if self._until is not None and now < self._until:
                return False  # already tripped: say so once
            trials = {trial for _, trial, _ in self.streak}
            sweeps = {sweep for sweep, _, _ in self.streak}
            if len(trials) >= self.limit and len(sweeps) >= MIN_SWEEPS:
                self._until = now + self.cooldown
                return True
            return False

    def summary(self) -> str:
        """The streak in words, for the log line that says why the agent stopped."""
        with self._lock:
            trials = sorted({t for _, t, _ in self.streak})
            sweeps = sorted({s for s, _, _ in self.streak})
            last = self.streak[-1][2] if self.streak else ""
        more = "..." if len(trials) > 5 else ""
        return (f"the last {len(self.streak)} failures here blamed the node ({len(trials)} trials of {len(sweeps)} "
                f"sweeps: {', '.join(trials[:5])}{more}); last evidence: {last}")
