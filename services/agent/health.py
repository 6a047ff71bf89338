"""Is this node broken? A circuit breaker over the attempts an agent ran.

A node with a dead GPU, a full disk or a broken driver fails every trial it
touches, in seconds, and would burn through a whole sweep's retry budget
while healthy nodes wait. The breaker trips when the attempts that ended on
this agent since its last success all failed, and they were attempts of at
least ``limit`` different trials (one bad trial retried here is the trial's
fault, not the node's) from at least two different sweeps (one sweep whose
script fails everywhere is the sweep's fault: it must not switch off every
healthy agent it touches). Any completed attempt resets it; preemptions and
cancellations say nothing about the node.

A trip lasts ``cooldown`` seconds, not forever: a node that was only
unlucky (or a sweep that happened to be broken alongside another's flake)
takes trials again afterwards. The streak is kept across the cooldown, so
on a node that is still broken the first failure afterwards trips it again
at once (a half-open breaker), and only a success clears it.

Pure apart from its clock: :meth:`Health.record` takes the final event and
returns whether the breaker has just tripped; the agent does the stopping
and the resuming.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spotsweep.shared.messages import TrialFinished

# Failures that point at the node. Not "lost" (the agent died, which says
# nothing we can act on here) and not "timeout" (the trial's own budget).
NODE_FAILURES = frozenset({"exit", "oom", "stalled", "agent"})
MIN_SWEEPS = 2  # a streak within one sweep blames the sweep, not the node
DEFAULT_COOLDOWN_S = 600.0


@dataclass
class Health:
    limit: int = 5  # 0 disables the breaker
    cooldown: float = DEFAULT_COOLDOWN_S  # seconds a trip keeps the agent from taking trials
    clock: Callable[[], float] = time.monotonic
    # (sweep_id, trial_id, last line of the error) of each failed attempt since the last success
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
            if final.outcome != "failed" or final.failure not in NODE_FAILURES or self.limit <= 0:
                return False
            last_line = (final.error or "").strip().splitlines()[-1:] or [f"exit code {final.exit_code}"]
            self.streak.append((final.sweep_id, final.trial_id, last_line[0][:200]))
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
        return (f"the last {len(self.streak)} attempts here failed ({len(trials)} trials of {len(sweeps)} sweeps: "
                f"{', '.join(trials[:5])}{more}); last error: {last}")
