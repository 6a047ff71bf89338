"""A run's lines, read in order, with each announced checkpoint uploaded and committed.

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

from collections import deque
from collections.abc import Callable
from pathlib import Path

from spotsweep.services.agent import uploads
from spotsweep.services.agent.lines import Checkpoint, Points
from spotsweep.services.agent.pump import MetricPump
from spotsweep.services.agent.screen import Screen
from spotsweep.services.agent.tail import Item, Tail
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import CheckpointSaved, Envelope, TrialMessage

_log = log.get("spotsweep.agent")


class LineReader:
    """Routes a run's screened lines: points to the pump, checkpoints to the store."""

    def __init__(self, msg: TrialMessage, tail: Tail, screen: Screen, pump: MetricPump, store: ArtifactStore,
                 ckpt_dir: Path, publish: Callable[[Envelope], None], confirm: Callable[[], None]) -> None:
        self._msg = msg
        self._tail = tail
        self._screen = screen
        self._pump = pump
        self._store = store
        self._ckpt_dir = ckpt_dir
        self._publish = publish
        self._confirm = confirm  # blocks until every event published so far is on the broker
        self._pending: deque[Item] = deque()

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
                staged = uploads.stage(self._ckpt_dir)
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
        uri = uploads.checkpoint(self._store, msg, step, staged, dict(self._pump.final))
        if uri is not None:
            self._publish(CheckpointSaved(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, step=step,
                                          uri=uri))
        return newer
