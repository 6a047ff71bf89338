"""The agent's S3 traffic, with the policy each call needs.

A flaky object store must cost as little training as possible: restores and
checkpoint uploads are retried with backoff; a checkpoint that still cannot
be uploaded (or is invalid, e.g. an empty directory) is logged and skipped,
because killing a healthy trial over it would lose more than the checkpoint;
logs are best effort, because a completed trial must not run again for them,
and bounded (``limits.log_bytes``): a trial printing without end keeps its
last bytes.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import IO, BinaryIO

from spotsweep.shared import log
from spotsweep.shared import metrics as exported  # `metrics` is a trial's reported values here
from spotsweep.shared.artifacts.checkpoint_layout import loss_prefix
from spotsweep.shared.artifacts import retention
from spotsweep.shared.artifacts.checkpoints import (
    commit_checkpoint,
    folder_prefix,
    log_key,
    restore_checkpoint,
    restore_known,
    upload_checkpoint_files,
)
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.artifacts.workers import TransferCancelled
from spotsweep.shared.artifacts.safe_files import Entry, Walk, regular_files, same_file
from spotsweep.shared.errors import Refused, SpotsweepError
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.middleware import Backoff, retrying

_log = log.get("spotsweep.agent")
S3_BACKOFF = Backoff(base=0.5, cap=8.0, attempts=5)


def restore(store: ArtifactStore, msg: TrialMessage, directory: Path, metrics: dict[str, float],
            redelivered: bool = False) -> int | None:
    """The latest checkpoint's step, restored into ``directory`` (``metrics``: the values reported up to it);
    None on a fresh start. ``msg.resume_from`` spares the store what the planner knows: no request at all
    when no run has started, no listing for a known checkpoint. A ``redelivered`` delivery may follow a run
    the planner never heard of, which may have committed one: it lists, as does a message without the field.
    Raises :class:`RetryableError` when S3 stays unreachable: the trial goes back to the queue rather than
    restart from step 0."""
    known = msg.resume_from
    if known is not None and known.folder is None and not redelivered:
        return None
    if known is not None and known.folder is not None:
        folder = known.folder
        return retrying(lambda: restore_known(store, msg.sweep_id, msg.trial_id, folder, directory, metrics), S3_BACKOFF,
                        what="restore checkpoint")  # type: ignore[return-value]
    return retrying(lambda: restore_checkpoint(store, msg.sweep_id, msg.trial_id, directory, metrics), S3_BACKOFF,
                    what="restore checkpoint")  # type: ignore[return-value]


def snapshot(directory: Path, into: Path, max_files: int | None = None) -> Path:
    """Hard-link the checkpoint's files into ``into`` (copies across devices): a consistent set even if
    the script renames newer files into place while the upload runs, as the contract allows. A file gone
    between the listing and its link is skipped (scripts delete older checkpoints, as Lightning's
    ``save_top_k`` does). No link is followed, and as root only files the trial's user owns are taken,
    never a hard link to one it does not (:func:`~spotsweep.shared.artifacts.safe_files.regular_files`):
    a trial hands over only what it could read itself, and a warning names the rest.
    More than ``max_files`` (``limits.checkpoint_files``) is :class:`Refused`: each file is a request,
    and the upload holds the slot."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True, exist_ok=True)
    walk = Walk()
    trial_uid = os.stat(directory, follow_symlinks=False).st_uid
    owner = trial_uid if os.geteuid() == 0 and trial_uid != 0 else None
    for n, entry in enumerate(regular_files(directory, walk, owner=owner, trial_uid=trial_uid), 1):
        if max_files is not None and n > max_files:
            shutil.rmtree(into, ignore_errors=True)
            raise Refused(f"the checkpoint directory holds more than {max_files} files (limits.checkpoint_files = "
                          f"{max_files}): not uploaded; pack small files into fewer (one archive or state file), "
                          "or raise limits.checkpoint_files in the spec")
        dst = into / entry.rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(entry, dst)
    if walk.skipped:
        _log.warning(f"checkpoint files skipped (links, special files and files the trial does not own are never "
                     f"uploaded): {walk.summary()}", directory=str(directory))
    return into


def _link_or_copy(entry: Entry, dst: Path) -> None:
    """Hard-link the file the walk opened at ``dst``, by its name in its directory
    (``linkat`` without following: a name the trial swapped for a link since is
    linked as the link itself, found unlike the open file, and replaced by a copy
    of the open file); copy it across devices."""
    try:
        os.link(entry.name, dst, src_dir_fd=entry.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return  # deleted since the walk listed it: the script moved on
    except OSError:
        pass
    else:
        if same_file(os.lstat(dst), entry.stat):
            return
        os.unlink(dst)
    with open(dst, "wb") as out:
        _copy_range(entry.fd, 0, entry.stat.st_size, out)


def stage(directory: Path, tries: int = 3, max_files: int | None = None) -> Path:
    """A hard-link snapshot of the checkpoint directory, to upload (:func:`snapshot`), taken again up to
    ``tries`` times when a folder vanishes during the walk (the script replaced a sub-directory); then the
    caller skips that checkpoint."""
    into = directory.with_name(directory.name + ".uploading")
    for _ in range(tries - 1):
        with suppress(FileNotFoundError):
            return snapshot(directory, into, max_files)
    return snapshot(directory, into, max_files)


def checkpoint(store: ArtifactStore, msg: TrialMessage, step: int, staged: Path,
               metrics: dict[str, float] | None = None, cancel: Callable[[], bool] | None = None) -> str | None:
    """Upload a staged checkpoint (with the metrics reported so far), commit it,
    prune older ones as ``msg.checkpoint_keep`` says and remove the stage; its
    URI, or None when it could not be uploaded. A prune that fails is logged:
    the checkpoint is committed, and the next prune deletes what this one left.
    ``cancel``: once it says so (a draining node out of grace, :class:`.committer.DrainClock`; a run whose
    hold lapsed, :mod:`.hold`, whose attempt may run elsewhere now) the upload is abandoned uncommitted, asked
    last just before ``LATEST`` moves; a resume takes the previous complete checkpoint."""
    def upload() -> str:
        if cancel is not None and cancel():
            raise TransferCancelled("no time left to upload it")
        folder = upload_checkpoint_files(store, msg.sweep_id, msg.trial_id, step, staged, metrics, cancel)
        if cancel is not None and cancel():  # asked again at the last moment: LATEST is what a resume trusts
            raise TransferCancelled("the upload was cancelled before its commit")
        commit_checkpoint(store, msg.sweep_id, msg.trial_id, folder)
        return folder

    began, size = time.monotonic(), _bytes_under(staged)
    try:
        folder: str = retrying(upload, S3_BACKOFF, what="upload checkpoint")  # type: ignore[assignment]
        exported.CHECKPOINT_UPLOAD_SECONDS.observe(time.monotonic() - began)
        exported.CHECKPOINT_UPLOAD_BYTES.inc(size)
    except TransferCancelled:
        _log.warning("checkpoint abandoned uncommitted: the node is going away and its upload could not finish within "
                     "the grace, or the agent's hold on the attempt lapsed (hold.py); the trial resumes from its "
                     "previous complete checkpoint", step=step, bytes=size,
                     seconds=round(time.monotonic() - began, 1), trial_id=msg.trial_id)
        return None
    except (SpotsweepError, OSError) as e:  # an upload problem is never charged to the trial
        _log.error("checkpoint not uploaded; the trial goes on", step=step, error=str(e), trial_id=msg.trial_id)
        return None
    except Exception as e:  # nor is an error no adapter translated (a client bug): the trial's
        # result must not hang on its checkpoints; the next checkpoint tries again, and the traceback is logged
        _log.exception("checkpoint not uploaded (unexpected error); the trial goes on", step=step, error=repr(e),
                       trial_id=msg.trial_id)
        return None
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    try:
        retention.after_commit(store, msg.sweep_id, msg.trial_id, folder, msg.checkpoint_keep, msg.metric, msg.metric_mode)
    except Exception as e:  # committed: a prune that fails in any way is the next prune's to redo
        _log.warning("old checkpoints not pruned", step=step, error=repr(e), trial_id=msg.trial_id)
    return store.uri(folder_prefix(msg.sweep_id, msg.trial_id, folder))


def _bytes_under(staged: Path) -> int:
    """The size of a staged checkpoint's files (``spotsweep_checkpoint_upload_bytes_total``); links are not followed."""
    total = 0
    for parent, _dirs, files in os.walk(staged):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def nothing_stored(msg: TrialMessage, redelivered: bool, resumed: int | None, committed: int) -> bool:
    """Whether the store holds no checkpoint of the trial once a run ends (the planner knew of none, on a
    first delivery, and the run restored and committed none): then retention, a request, is skipped."""
    known = msg.resume_from
    return known is not None and known.folder is None and not redelivered and resumed is None and committed == 0


def retain(store: ArtifactStore, msg: TrialMessage, pruned: bool = False) -> None:
    """Apply the retention policy once an attempt's process is gone
    (:mod:`~spotsweep.shared.artifacts.retention`): ``pruned``, the planner
    ended the trial by early stopping, so none of its checkpoints is needed.
    Best effort: a failure is logged, and what it left is only more kept."""
    try:
        if pruned and msg.checkpoint_keep != "all":
            retention.delete_all(store, msg.sweep_id, msg.trial_id)
        else:
            retention.at_end(store, msg.sweep_id, msg.trial_id, msg.checkpoint_keep, msg.metric, msg.metric_mode)
    except SpotsweepError as e:
        _log.warning("checkpoint retention not applied", error=str(e), trial_id=msg.trial_id)


def logs(store: ArtifactStore, msg: TrialMessage, streams: dict[str, tuple[Path, BinaryIO]],
         log_bytes: int, backoff: Backoff = S3_BACKOFF, copy: bool = False) -> tuple[str | None, str | None]:
    """Upload stdout and stderr (those not empty), the last ``log_bytes`` of the two together: the logs
    folder's URI (None: nothing uploaded) and a note of what was cut, if anything. Sizes and bytes come from
    the agent's own descriptors, never the paths, which the trial may have replaced (with a FIFO, a link).
    ``copy``: upload a copy of the bytes written so far, never the file the trial is still writing."""
    sizes = {stream: os.fstat(f.fileno()).st_size for stream, (_, f) in streams.items()}
    # Each stream gets half, and what one does not use the other may (stderr first: it holds the error).
    keep_err = min(sizes.get("stderr", 0), max(log_bytes // 2, log_bytes - sizes.get("stdout", 0)))
    keep = {"stdout": min(sizes.get("stdout", 0), log_bytes - keep_err), "stderr": keep_err}
    dropped = {stream: sizes[stream] - keep[stream] for stream in sizes if sizes[stream] > keep[stream]}
    uri = None
    try:
        for stream, (path, f) in streams.items():
            if sizes[stream] == 0:
                continue  # nothing to keep: most trials write nothing to one of the two
            key = log_key(msg.sweep_id, msg.trial_id, msg.attempt, stream)
            if stream not in dropped and not copy and _same_file(path, f):
                uri = retrying(partial(store.put_file, key, path), backoff, what="upload logs")
                continue
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{stream}-upload-") as snap:
                if stream in dropped:
                    snap.write(f"[spotsweep: the first {dropped[stream]} bytes of {stream} were dropped "
                               f"(limits.log_bytes = {log_bytes} for stdout and stderr together)]\n".encode())
                _copy_range(f.fileno(), sizes[stream] - keep[stream], sizes[stream], snap)
                snap.flush()
                uri = retrying(partial(store.put_file, key, Path(snap.name)), backoff, what="upload logs")
    except SpotsweepError as e:
        _log.error("logs not uploaded", error=str(e), trial_id=msg.trial_id)
        return None, None
    note = None
    if dropped:
        cut = ", ".join(f"the first {n} bytes of {stream}" for stream, n in sorted(dropped.items()))
        note = f"logs cut to their last {log_bytes} bytes (limits.log_bytes): dropped {cut}"
    return (str(uri).rsplit("/", 1)[0] if uri else None), note


def _same_file(path: Path, f: BinaryIO) -> bool:
    """Whether ``path`` still is the regular file the agent opened (the trial did not swap it)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    own = os.fstat(f.fileno())
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _copy_range(fd: int, start: int, end: int, into: IO[bytes], chunk: int = 1 << 20) -> None:
    while start < end:
        data = os.pread(fd, min(chunk, end - start), start)
        if not data:
            return
        into.write(data)
        start += len(data)


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
