"""Is this node broken? A circuit breaker over the attempts an agent ran.

A node with a dead GPU, a full disk or a broken driver fails every trial it
touches, in seconds, and would burn through a whole sweep's retry budget
while healthy nodes wait. When the last ``limit`` ended attempts on this
agent all failed, and they were attempts of at least ``limit`` different
trials (one bad trial retried here is the trial's fault, not the node's), the
agent stops taking trials and says why. Any completed attempt resets it;
preemptions and cancellations say nothing about the node.

Pure: :meth:`Health.record` takes the final event and returns whether the
breaker has just tripped; the agent does the stopping.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from spotsweep.shared.messages import TrialFinished

# Failures that point at the node. Not "lost" (the agent died, which says
# nothing we can act on here) and not "timeout" (the trial's own budget).
NODE_FAILURES = frozenset({"exit", "oom", "stalled", "agent"})


@dataclass
class Health:
    limit: int = 5  # 0 disables the breaker
    streak: list[tuple[str, str]] = field(default_factory=list)  # (trial_id, first line of error) since the last success
    tripped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, final: TrialFinished) -> bool:
        """Account for one ended attempt; True exactly when this one trips the breaker."""
        with self._lock:
            if final.outcome == "completed":
                self.streak.clear()
                return False
            if final.outcome != "failed" or final.failure not in NODE_FAILURES or self.limit <= 0 or self.tripped:
                return False
            first_line = (final.error or "").strip().splitlines()[-1:] or [f"exit code {final.exit_code}"]
            self.streak.append((final.trial_id, first_line[0][:200]))
            if len({trial for trial, _ in self.streak}) >= self.limit:
                self.tripped = True
                return True
            return False

    def summary(self) -> str:
        with self._lock:
            trials = sorted({t for t, _ in self.streak})
            last = self.streak[-1][1] if self.streak else ""
        return f"the last {len(self.streak)} attempts here failed ({len(trials)} trials: {', '.join(trials[:5])}...); last error: {last}"
