"""A run's lines, read in order: points batched and published, each announced checkpoint uploaded and committed.

:class:`MetricPump` holds parsed points in one batch and publishes it as one
``trial.metrics`` event when it reaches ``batch_points`` points or its oldest
point is ``batch_seconds`` old (and always before a checkpoint is committed
and when the run ends); where the sweep stops early, the objective's points
also go out as ``trial.progress``. It keeps the last value of every metric
(the final event's metrics) and the last step.

The script may rewrite its checkpoint directory as soon as it is complete
again, so a snapshot can hold a newer state than the line that triggered it
(when uploads lag behind training). Whatever it holds, every point reported
before it was written is in the metrics file by the time of the snapshot:
:meth:`LineReader.checkpoint` reads and publishes them all, and waits for
the broker to confirm them, before committing the snapshot, so a resume from
it never skips a point. Lines read meanwhile that announce a newer
checkpoint get a snapshot of their own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from spotsweep.services.agent import uploads
from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.lines import Checkpoint, Points
from spotsweep.services.agent.screen import Screen
from spotsweep.services.agent.tail import Item, Tail
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import Refused
from spotsweep.shared.messages import CheckpointSaved, Envelope, TrialMessage, TrialMetrics, TrialProgress

_log = log.get("spotsweep.agent")


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


class DrainClock:
    """When the node began going away, as this run saw it, and whether a checkpoint upload must give up.

    An upload in flight when the preemption arrives goes on (the supervisor's loop
    waits for it, so the trial gets its SIGTERM after it), but only until ``grace``
    seconds after the preemption was first seen: past that the upload is abandoned
    between two requests, its folder stays incomplete, and the trial is reported
    preempted and resumes from the previous complete checkpoint, before the
    agent's drain deadline (``--grace`` + ``--after-grace``) would cut it off as
    lost. A hard stop or a lost delivery abandons it at once. Polled from the
    upload's threads and the supervisor's loop."""

    def __init__(self, control: RunControls, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._control, self._grace, self._clock = control, grace, clock
        self._since: float | None = None
        self._lock = threading.Lock()

    def since(self) -> float | None:
        """When the preemption was first seen (now, if it is seen for the first time); None before."""
        if self._since is None and self._control.preempt.is_set():
            with self._lock:
                if self._since is None:
                    self._since = self._clock()
        return self._since

    def out_of_time(self) -> bool:
        """Whether a checkpoint upload must be abandoned now."""
        if self._control.kill.is_set() or self._control.lost.is_set():
            return True
        since = self.since()
        return since is not None and self._clock() - since > self._grace


class LineReader:
    """Routes a run's screened lines: points to the pump, checkpoints to the store."""

    def __init__(self, msg: TrialMessage, tail: Tail, screen: Screen, pump: MetricPump, store: ArtifactStore,
                 ckpt_dir: Path, publish: Callable[[Envelope], None], confirm: Callable[[], None],
                 cancel: Callable[[], bool] | None = None) -> None:
        self._msg = msg
        self._tail = tail
        self._screen = screen
        self._pump = pump
        self._store = store
        self._ckpt_dir = ckpt_dir
        self._publish = publish
        self._confirm = confirm  # blocks until every event published so far is on the broker
        self._pending: deque[Item] = deque()
        self._cancel = cancel  # a DrainClock's out_of_time: abandon an upload the node has no time left for

    def consume(self, items: list[Item]) -> None:
        """Take lines read from the metrics file, committing each checkpoint they announce."""
        self._pending.extend(items)
        while self._pending:
            parsed = self._screen.admit(*self._pending.popleft())
            if isinstance(parsed, Checkpoint):
                self.checkpoint(parsed.step)
            elif isinstance(parsed, Points):
                self._pump.take(parsed)

    def checkpoint(self, step: int) -> None:
        """Snapshot, publish every point before it, upload and announce the checkpoint of ``step``
        (and of any newer one announced meanwhile)."""
        label: int | None = step
        while label is not None:
            try:
                staged = uploads.stage(self._ckpt_dir, max_files=self._msg.limits.checkpoint_files)
            except Refused as e:  # the trial's doing: said in its warnings, and the trial goes on
                self._screen.note("checkpoint_refused", f"checkpoint step {label} not uploaded: {e}")
                return
            except OSError as e:  # never the trial's fault: that checkpoint is skipped, the next one comes
                _log.warning("checkpoint skipped: its files could not be snapshot", step=label, error=repr(e),
                             trial_id=self._msg.trial_id)
                return
            label = self._commit(label, staged, self._points_up_to_now())

    def _points_up_to_now(self) -> int | None:
        """Publish every point in the file by now; the newest checkpoint announced among them, if any."""
        self._pending.extend(self._tail.read())
        newer = None
        while self._pending:
            parsed = self._screen.admit(*self._pending.popleft())
            if isinstance(parsed, Checkpoint):
                newer = parsed.step
            elif isinstance(parsed, Points):
                self._pump.take(parsed)
        self._pump.flush()
        return newer

    def _commit(self, step: int, staged: Path, newer: int | None) -> int | None:
        self._confirm()  # the points the snapshot's state has passed are on the broker before it is committed
        msg = self._msg
        uri = uploads.checkpoint(self._store, msg, step, staged, dict(self._pump.final), self._cancel)
        if uri is not None:
            self._publish(CheckpointSaved(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, step=step,
                                          uri=uri))
        return newer
