"""One run's resource samples and anomaly flags, wired into the supervision loop.

Each poll :class:`RunMonitor` takes a resource sample when one is due
(:mod:`.resources`), sends it as ``sys/`` points through the pump, and folds
the trial's points, samples and silence into the run's anomaly
:class:`~.anomalies.Watch`. A flag that rises goes to the planner at once (a
``trial.progress`` event with no points), so ``trial_results.flags`` shows it
while the trial runs; at the end every flag is noted on the run's screen, for
the final event. With ``memory_limit`` (where the agent cannot give the trial
a memory cgroup: :mod:`.cgroup`) a sample over it kills the trial's process
group: a fast leak can go past the limit until the next sample, as a cgroup's
would not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spotsweep.services.agent import anomalies, lines
from spotsweep.services.agent.anomalies import Watch
from spotsweep.services.agent.resources import MIB, SAMPLE_EVERY_S, Sampler, due
from spotsweep.services.agent.signals import killpg
from spotsweep.services.agent.screen import Screen
from spotsweep.shared import log
from spotsweep.shared.messages import Envelope, TrialMessage, TrialProgress

_log = log.get("spotsweep.agent")


class RunMonitor:
    """Samples and anomaly flags of one run (see the module's docstring)."""

    def __init__(self, msg: TrialMessage, run_id: str, pid: int, publish: Callable[[Envelope], None],
                 take_samples: Callable[[int, dict[str, float]], None], every: float = SAMPLE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, sampler: Sampler | None = None,
                 memory_limit: int | None = None) -> None:
        self._msg = msg
        self._run_id = run_id
        self._publish = publish
        self._take_samples = take_samples  # the pump's: sys/ points go out with the trial's own
        self._every = max(1.0, min(every, SAMPLE_EVERY_S))  # whole-second steps: at most one sample a second
        self._clock = clock
        self._started = clock()
        self._last: float | None = None
        self._sampler = sampler or Sampler(pid)
        self.watch = Watch(msg.metric, msg.metric_mode, msg.stall_timeout)
        self._sent: set[str] = set()
        self._pid = pid
        self._memory_limit = memory_limit
        self.over_memory = False  # killed for going over memory_limit

    def points(self, points: lines.Points) -> None:
        """A line of the trial's points, as the pump took it."""
        self.watch = anomalies.decide(self.watch, points)

    def poll(self, silent_for: float) -> None:
        """Once per poll: ``silent_for`` seconds since the trial's last line. Samples when due; sends new flags."""
        now = self._clock()
        self.watch = anomalies.decide(self.watch, anomalies.Silence(silent_for))
        if due(now, self._started, self._last, self._every):
            self._last = now
            values = self._sampler.sample()
            if values:
                self._take_samples(int(self._msg.elapsed + now - self._started), values)
                self.watch = anomalies.decide(self.watch, anomalies.Sample(now, values))
                if self._memory_limit is not None and values.get("sys/rss_mb", 0.0) * MIB > self._memory_limit:
                    self.over_memory = True
                    killpg(self._pid)
        new = [flag for flag in self.watch.flags if flag not in self._sent]
        if new:
            self._sent.update(new)
            _log.warning("trial flagged", flags=new, trial_id=self._msg.trial_id,
                         why=[self.watch.flags[f] for f in new])
            msg = self._msg
            self._publish(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                        run_id=self._run_id, points=[], flags=new))

    def finish(self, screen: Screen) -> None:
        """The run is over: note every flag raised on its screen (for the final event's flags and warnings)."""
        for flag, why in self.watch.flags.items():
            screen.note(flag, f"{flag}: {why}")
