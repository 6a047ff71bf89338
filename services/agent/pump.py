"""A run's metric points, batched and published while the trial runs.

Points parsed from the metrics file are held in one batch and published as
one ``trial.metrics`` event when the batch reaches ``batch_points`` points or
its oldest point is ``batch_seconds`` old (and always before a checkpoint is
committed and when the run ends). Where the sweep stops early, the objective's
points of each batch also go out as ``trial.progress``. The pump keeps the
last value of every metric (the final event's metrics) and the last step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spotsweep.services.agent.lines import Points
from spotsweep.shared.messages import Envelope, TrialMessage, TrialMetrics, TrialProgress


class MetricPump:
    """Batches one run's points and publishes them (see the module's docstring)."""

    def __init__(self, msg: TrialMessage, run_id: str, publish: Callable[[Envelope], None], batch_points: int,
                 batch_seconds: float, restored: dict[str, float] | None = None) -> None:
        self._msg = msg
        self._run_id = run_id
        self._publish = publish
        self._batch_points = batch_points
        self._batch_seconds = batch_seconds
        self._batch: list[tuple[int, str, float]] = []  # (step, name, value) not yet published
        self._oldest = 0.0
        # Final metrics start from what the checkpoint kept: a resumed run need
        # not re-report what was reported before it, even by a run that was lost.
        self.final: dict[str, float] = dict(restored or {})
        self.last_step: int | None = None
        self.watch: Callable[[Points], None] | None = None  # sees every line's points (the run's anomaly flags)

    def take(self, points: Points) -> None:
        """Add one line's points; publish the batch once it is full."""
        if not self._batch:
            self._oldest = time.monotonic()
        self._batch.extend((points.step, k, v) for k, v in points.values.items())
        self.final.update(points.values)
        self.last_step = points.step
        if self.watch is not None:
            self.watch(points)
        if len(self._batch) >= self._batch_points:
            self.flush()

    def take_samples(self, step: int, values: dict[str, float]) -> None:
        """Add the agent's own ``sys/`` points (:mod:`.resources`): sent like the trial's, yet
        neither its final metrics nor its last step."""
        if not self._batch:
            self._oldest = time.monotonic()
        self._batch.extend((step, k, v) for k, v in values.items())

    def flush_if_due(self, now: float) -> None:
        """Publish the batch if its oldest point has waited ``batch_seconds``."""
        if self._batch and now - self._oldest >= self._batch_seconds:
            self.flush()

    def flush(self) -> None:
        """Publish what the batch holds, if anything."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        msg = self._msg
        steps, names, values = (list(column) for column in zip(*batch))
        self._publish(TrialMetrics(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, steps=steps,
                                   names=names, values=values))
        objective = [(step, value) for step, name, value in batch if name == msg.metric]
        if msg.progress and objective:  # early stopping judges the objective while the trial runs
            self._publish(TrialProgress(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt,
                                        run_id=self._run_id, points=objective))
