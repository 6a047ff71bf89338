"""Is this node broken? A circuit breaker over the failures an agent saw.

A node with a dead GPU, a full disk or a broken driver fails every trial it
touches, in seconds, and would burn through a whole sweep's retry budget
while healthy nodes wait. A sweep with a bug fails every trial too, on every
node: that is the sweep's fault, and its own breaker stops it (the planner's
:mod:`~spotsweep.services.planner.breaker`). So this one counts only
failures with evidence against the node (:func:`node_evidence`), and the
evidence is only what the agent observed itself, never text a trial printed
(any submitter can print "uncorrectable ECC error", "No space left on
device: '<the agent's path>'" or "OCI runtime create failed", issue 39):

* the agent's own errors (``failure="agent"``: it broke running the trial,
  or the container runtime failed a known-good probe container after a
  trial's container never started: :mod:`.verdict`);
* after a trial exited non-zero or stalled, what the agent sees of the node
  (:class:`Observer`): the disk of its own folders nearly full
  (:func:`disk_evidence`: under :data:`MIN_FREE_BYTES` free, once the run's
  own folder is gone; a trial that filled the disk elsewhere, /tmp, left it
  full for every trial, which counts), a GPU
  that NVML finds lost or with uncorrected ECC errors since the driver
  loaded (:func:`gpu_evidence`).

Never an ordinary non-zero exit whatever its text, a CUDA out-of-memory, a
timeout, a lost attempt, nor a refusal of bad input (``failure="refused"``:
a refused code archive, a command that cannot be started, a container the
runtime would not start while a probe container starts): those say nothing
about the node, and any submitter can cause them. A failure without evidence
neither counts nor clears the streak. What an Observer cannot see (an Xid
that left the GPU answering, a driver that fails only some kernels) does not
trip the breaker: a trial's words for it are not believed.

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

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spotsweep.services.agent.resources import NVML
from spotsweep.shared.messages import TrialFinished
from spotsweep.shared.quantity import human_bytes

MIN_SWEEPS = 2  # a streak within one sweep blames the sweep, not the node
DEFAULT_COOLDOWN_S = 600.0
# Failure kinds after which the agent looks at the node ("oom" is the trial's
# memory, "timeout" its budget, "lost" says nothing here, "refused" its input).
_LOOK = frozenset({"exit", "stalled"})
MIN_FREE_BYTES = 512 * 2**20  # a disk of the agent's with less free (to it) is full


def node_evidence(final: TrialFinished, observe: Callable[[], str | None] = lambda: None) -> str | None:
    """Why ``final`` blames the node (the agent's own error's first line, or what ``observe`` saw of the node after
    an exit or a stall); None when it says nothing about it. The trial's error text is never read for evidence."""
    if final.outcome != "failed":
        return None
    if final.failure == "agent":
        return _first_line(final.error if isinstance(final.error, str) else "") or "agent error"
    return observe() if final.failure in _LOOK else None


def disk_evidence(path: str, free: int, total: int) -> str | None:
    """A full disk under the agent's folder ``path`` (``free`` of ``total`` bytes left to it), or None."""
    if free < MIN_FREE_BYTES:
        return f"the agent's disk is full: {path} has {human_bytes(free)} free of {human_bytes(total)}"
    return None


def gpu_evidence(gpus: Sequence[tuple[int, str | None, int]]) -> str | None:
    """A broken GPU among ``(index, NVML's error reading it or None, uncorrected ECC errors)``, or None."""
    for index, error, ecc in gpus:
        if error is not None:
            return f"GPU {index} cannot be read by NVML: {error[:120]}"
        if ecc > 0:
            return f"GPU {index} has {ecc} uncorrected ECC errors since the driver loaded (NVML)"
    return None


@dataclass(frozen=True)
class Observer:
    """What the agent sees of its node after a failure: its folders' disks and its GPUs (NVML, where there is one)."""

    paths: tuple[str, ...] = ()

    def __call__(self) -> str | None:
        for path in self.paths:
            try:
                st = os.statvfs(path)
            except OSError:
                continue
            found = disk_evidence(path, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
            if found is not None:
                return found
        return gpu_evidence(_gpus())


def _gpus() -> list[tuple[int, str | None, int]]:
    nvml = NVML._load()  # noqa: SLF001 - the agent's one NVML session (resources.py)
    if nvml is None:
        return []
    out: list[tuple[int, str | None, int]] = []
    try:
        count = nvml.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001 - the driver does not answer: that is the node's
        return [(-1, str(e) or type(e).__name__, 0)]
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:  # noqa: BLE001 - GPU lost, off the bus
            out.append((index, str(e) or type(e).__name__, 0))
            continue
        try:
            ecc = int(nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                       nvml.NVML_VOLATILE_ECC))
        except Exception:  # noqa: BLE001 - no ECC on this GPU (or not supported): nothing seen
            ecc = 0
        out.append((index, None, ecc))
    return out


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


@dataclass
class Health:
    limit: int = 5  # 0 disables the breaker
    cooldown: float = DEFAULT_COOLDOWN_S  # seconds a trip keeps the agent from taking trials
    clock: Callable[[], float] = time.monotonic
    own_paths: tuple[str, ...] = ()  # the agent's folders: a full disk there is the node's (Observer)
    observe: Callable[[], str | None] | None = None  # what the agent sees of the node; None: Observer(own_paths)
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
            evidence = node_evidence(final, self.observe or Observer(self.own_paths))
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
