"""Uploading a running trial's stdout and stderr every few seconds.

``spotsweep logs`` and the dashboard read a trial's logs from the artifact
store, so that they outlive the node; without this they would appear only
when the attempt ends. A daemon thread uploads what the trial has written so
far every ``SPOTSWEEP_LOG_UPLOAD_SECONDS`` (default 15 s, so the store is at
most that far behind), bounded like the final upload (``limits.log_bytes``),
and always as a copy of the bytes written so far, never the growing file
itself. Each upload is tried once: a store that is down costs one log line and
the next period tries again; the final upload at the attempt's end keeps its
retries. The thread is stopped (and joined) before that final upload, so an
older snapshot never overwrites it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO

from spotsweep.services.agent import uploads
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.middleware import Backoff

_log = log.get("spotsweep.agent")
ONCE = Backoff(attempts=1)


class LogShipper:
    """``with LogShipper(store, msg, streams):`` uploads the logs periodically for the block's duration."""

    def __init__(self, store: ArtifactStore, msg: TrialMessage, streams: dict[str, tuple[Path, BinaryIO]],
                 seconds: float) -> None:
        self._store, self._msg, self._streams = store, msg, streams
        self._seconds = max(0.05, seconds)  # SPOTSWEEP_LOG_UPLOAD_SECONDS, through RunnerConfig
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"logs-{msg.trial_id}", daemon=True)
        self._sizes: dict[str, int] = {}

    def __enter__(self) -> LogShipper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._seconds):
            try:
                self.ship()
            except Exception as e:  # never let a log upload take the trial down
                _log.warning("periodic log upload failed", error=str(e), trial_id=self._msg.trial_id)

    def ship(self) -> bool:
        """Upload the logs if they grew since the last upload; whether it did."""
        sizes = {s: os.fstat(f.fileno()).st_size for s, (_, f) in self._streams.items()}
        if sizes == self._sizes or not any(sizes.values()):
            return False
        uri, _ = uploads.logs(self._store, self._msg, self._streams, self._msg.limits.log_bytes, ONCE, copy=True)
        if uri is not None:
            self._sizes = sizes
        return uri is not None
