"""The agent's S3 traffic, with the policy each call needs.

A flaky object store must cost as little training as possible: restores and
checkpoint uploads are retried with backoff; a checkpoint that still cannot
be uploaded (or is invalid, e.g. an empty directory) is logged and skipped,
because killing a healthy trial over it would lose more than the checkpoint;
logs are best effort, because a completed trial must not run again for them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from functools import partial
from pathlib import Path

from spotsweep.shared import log
from spotsweep.shared.artifacts.checkpoint_layout import loss_prefix
from spotsweep.shared.artifacts.checkpoints import log_key, restore_checkpoint, upload_checkpoint
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.middleware import Backoff, retrying

_log = log.get("spotsweep.agent")
S3_BACKOFF = Backoff(base=0.5, cap=8.0, attempts=5)


def restore(store: ArtifactStore, msg: TrialMessage, directory: Path, metrics: dict[str, float]) -> int | None:
    """The latest checkpoint's step, restored into ``directory``; None on a fresh start.
    ``metrics`` gets the metric values reported up to that checkpoint.

    Raises :class:`RetryableError` when S3 stays unreachable: the trial goes
    back to the queue rather than restart from step 0.
    """
    return retrying(lambda: restore_checkpoint(store, msg.sweep_id, msg.trial_id, directory, metrics), S3_BACKOFF,
                    what="restore checkpoint")  # type: ignore[return-value]


def snapshot(directory: Path, into: Path) -> Path:
    """Hard-link the checkpoint's files into ``into``: a consistent set even if
    the script renames newer files into place while the upload runs (the
    contract allows that once the line is written). Copies across devices."""
    shutil.rmtree(into, ignore_errors=True)
    for src in directory.rglob("*"):
        if src.is_file():
            dst = into / src.relative_to(directory)
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
    into.mkdir(parents=True, exist_ok=True)
    return into


def stage(directory: Path) -> Path:
    """A hard-link snapshot of the checkpoint directory, to upload (see :func:`snapshot`)."""
    return snapshot(directory, directory.with_name(directory.name + ".uploading"))


def checkpoint(store: ArtifactStore, msg: TrialMessage, step: int, staged: Path,
               metrics: dict[str, float] | None = None) -> str | None:
    """Upload a staged checkpoint (with the metrics reported so far) and remove the
    stage; its URI, or None when it could not be uploaded."""
    try:
        return retrying(lambda: upload_checkpoint(store, msg.sweep_id, msg.trial_id, step, staged, metrics=metrics), S3_BACKOFF,
                        what="upload checkpoint")  # type: ignore[return-value]
    except SpotsweepError as e:
        _log.error("checkpoint not uploaded; the trial goes on", step=step, error=str(e), trial_id=msg.trial_id)
        return None
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def logs(store: ArtifactStore, msg: TrialMessage, out_path: Path, err_path: Path) -> str | None:
    """Upload stdout and stderr (those not empty); the logs folder's URI, or None
    if there was nothing to upload or the upload failed."""
    uri = None
    try:
        for stream, path in (("stdout", out_path), ("stderr", err_path)):
            if not path.exists() or path.stat().st_size == 0:
                continue  # nothing to keep: most trials write nothing to one of the two
            key = log_key(msg.sweep_id, msg.trial_id, msg.attempt, stream)
            uri = retrying(partial(store.put_file, key, path), S3_BACKOFF, what="upload logs")
    except SpotsweepError as e:
        _log.error("logs not uploaded", error=str(e), trial_id=msg.trial_id)
        return None
    return str(uri).rsplit("/", 1)[0] if uri else None


def record_loss(store: ArtifactStore, msg: TrialMessage) -> int:
    """Count one more delivery of this attempt lost with its agent; returns the count so far.

    Why here and not in the broker: a classic queue (needed for priorities)
    keeps no delivery count, and a quorum queue's counts every return,
    graceful preemptions included. Every agent reaches the artifact store,
    and one uniquely named marker per loss makes the count race-free. When
    the store is unreachable this loss goes uncounted (1 is returned): the
    trial runs rather than waits.
    """
    prefix = loss_prefix(msg.sweep_id, msg.trial_id, msg.attempt)
    try:
        retrying(lambda: store.put_bytes(prefix + uuid.uuid4().hex, b""), S3_BACKOFF, what="record a lost delivery")
        return len(retrying(lambda: store.list(prefix), S3_BACKOFF, what="count lost deliveries"))  # type: ignore[arg-type]
    except SpotsweepError as e:
        _log.error("lost delivery not counted", error=str(e), trial_id=msg.trial_id)
        return 1
