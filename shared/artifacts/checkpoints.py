"""The checkpoint and log layout in the artifact store, built only on the port.

A trial's checkpoints live under ``sweeps/<sweep>/trials/<trial>/checkpoints/``::

    000000000010-3f9c1a2b7d4e/files/model.pt       one folder per upload: the
    000000000010-3f9c1a2b7d4e/files/opt/state.pt   step, zero-padded so that key
    000000000010-3f9c1a2b7d4e/MANIFEST             order is step order, and a
    000000000020-81d0c4e95a17/...                  token unique to the upload
    LATEST                                         {"step": 20, "folder": "000000000020-81d0c4e95a17"}

More than one agent can briefly run the same trial (a zombie whose connection
died while its uploads still run, and the trial's new owner), so the layout
never lets two writers share a folder or undo each other's commit:

* Every upload writes into a folder of its own and writes that folder's
  ``MANIFEST`` (each file's path, size and content hash) after all of its
  files. A folder is *complete* iff its ``MANIFEST`` exists; a node preempted
  mid-upload leaves an incomplete folder that nothing reads. Files go in
  parallel and by parts (:mod:`.transfer`); a file unchanged since the folder
  ``LATEST`` names is copied from it inside the store, never referenced: every
  folder holds all of its files, so pruning one never damages another.
* ``LATEST`` is written after the ``MANIFEST`` and names the folder: the
  commit, but only a hint. :func:`restore_checkpoint` uses the folder it names
  if that folder's ``MANIFEST`` and files are all there, and otherwise the
  newest complete, intact folder by step (then token); None only when there is
  none. It downloads a folder's files into a staging folder and moves them into
  place only once all of them arrived, so a restore never mixes two folders.
* Pruning (after each commit) never deletes the folder ``LATEST`` names, the
  folder just committed, or any folder newer than that one; of the older
  complete folders it keeps ``keep - 1``; incomplete folders go only when their
  step is below the oldest folder kept. Whatever interleaving of writers, the
  newest folder that ever got a ``MANIFEST`` is never deleted (deleting a
  folder takes a writer whose own committed folder is newer), so a restore
  always finds an intact checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath
from typing import Any

from spotsweep.shared.artifacts.checkpoint_layout import (_FOLDER_NAME, FILES, LATEST, MANIFEST, _complete_folders,
                                                          _folder_order, _folders, _listed_whole, _read_pointer,
                                                          checkpoint_prefix, folder_prefix, log_key, read_manifest,
                                                          read_manifest_hashes)
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.artifacts.safe_files import Walk, regular_files
from spotsweep.shared.artifacts.transfer import HASH, Previous, download_files, upload_files
from spotsweep.shared.errors import PermanentError, RetryableError

_log = log.get("spotsweep.artifacts")

__all__ = ["FILES", "LATEST", "MANIFEST", "checkpoint_prefix", "commit_checkpoint", "folder_prefix", "latest_checkpoint",
           "log_key", "prune_checkpoints", "restore_checkpoint", "restore_known", "upload_checkpoint",
           "upload_checkpoint_files"]


# -- writing ------------------------------------------------------------------


def upload_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, step: int, directory: Path, keep: int = 2,
                      metrics: dict[str, float] | None = None) -> str:
    """Upload ``directory`` as checkpoint ``step``, commit it, prune old ones; the folder's URI.

    ``keep`` counts complete checkpoints kept at or below this one, this one
    included. ``metrics`` (the last value of each reported up to this step) go in
    the manifest, so a run resumed from here knows them even when the run that
    reported them was lost before it could tell anyone."""
    if keep < 1:
        raise PermanentError(f"keep must be at least 1, got {keep}")
    folder = upload_checkpoint_files(store, sweep_id, trial_id, step, directory, metrics)
    commit_checkpoint(store, sweep_id, trial_id, folder)
    prune_checkpoints(store, sweep_id, trial_id, keep, committed=folder)
    return store.uri(folder_prefix(sweep_id, trial_id, folder))


def upload_checkpoint_files(store: ArtifactStore, sweep_id: str, trial_id: str, step: int, directory: Path,
                            metrics: dict[str, float] | None = None, cancel: Callable[[], bool] | None = None) -> str:
    """Upload every file under ``directory`` into a new folder, then its ``MANIFEST``,
    without committing (``LATEST`` is untouched); return the folder's name.
    ``cancel``: polled between requests; once it says so the upload is abandoned
    (:class:`~.workers.TransferCancelled`) and the folder stays incomplete."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise PermanentError(f"checkpoint step must be a non-negative int, got {step!r}")
    directory = Path(directory)
    if not directory.is_dir() or directory.is_symlink():
        raise PermanentError(f"checkpoint directory {str(directory)!r} does not exist (or is a link)")
    folder = f"{step:012d}-{uuid.uuid4().hex[:12]}"
    prefix = folder_prefix(sweep_id, trial_id, folder)
    walk = Walk()
    # Never through a link: a trial's link to /etc/passwd must not upload it (safe_files).
    sizes, sent = upload_files(store, prefix + FILES, regular_files(directory, walk),
                               _previous(store, sweep_id, trial_id), cancel)
    if walk.skipped:
        _log.warning(f"checkpoint step {step}: not uploaded, not regular files: {walk.summary()}", trial_id=trial_id)
    if not sizes:
        # Committing an empty checkpoint would replace a good one with nothing.
        raise PermanentError(f"checkpoint directory {str(directory)!r} holds no files")
    doc: dict[str, Any] = {"step": step, "files": sizes, "hash": HASH, "hashes": sent.hashes}
    if metrics:
        doc["metrics"] = metrics
    manifest = json.dumps(doc, sort_keys=True).encode()
    store.put_bytes(prefix + MANIFEST, manifest)  # last: the folder is complete
    if sent.copied:
        _log.info("checkpoint files unchanged since the last commit: copied in the store, not sent", step=step,
                  copied=len(sent.copied), trial_id=trial_id)
    return folder


def _previous(store: ArtifactStore, sweep_id: str, trial_id: str) -> Previous | None:
    """The committed folder ``LATEST`` names, to copy unchanged files from; None when
    there is none or it cannot be read (then every file is sent)."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    try:
        pointer = _read_pointer(store, sweep_id, trial_id)
        if pointer is None:
            return None
        sizes, _, hashes = read_manifest_hashes(store, prefix, pointer[1], HASH)
    except (NotFound, PermanentError):
        return None
    return Previous(f"{prefix}{pointer[1]}/{FILES}", sizes, hashes) if hashes else None


def commit_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, folder: str) -> None:
    """Point ``LATEST`` at ``folder``: call it only once the folder's
    ``MANIFEST`` is written."""
    if not _FOLDER_NAME.match(folder):
        raise PermanentError(f"not a checkpoint folder name: {folder!r}")
    pointer = json.dumps({"step": _folder_order(folder)[0], "folder": folder}, sort_keys=True).encode()
    store.put_bytes(checkpoint_prefix(sweep_id, trial_id) + LATEST, pointer)


def prune_checkpoints(store: ArtifactStore, sweep_id: str, trial_id: str, keep: int = 2, committed: str | None = None,
                      protect: Collection[str] = ()) -> list[str]:
    """Delete checkpoint folders no one needs (the rules: the module's docstring); the folders
    deleted (sorted). ``committed``: the folder this writer just committed (default: the one
    ``LATEST`` names). Folders in ``protect`` are kept besides (the retention policy's best
    checkpoint, :mod:`.retention`)."""
    if keep < 1:
        raise PermanentError(f"keep must be at least 1, got {keep}")
    prefix = checkpoint_prefix(sweep_id, trial_id)
    pointer = _read_pointer(store, sweep_id, trial_id)
    latest = pointer[1] if pointer else None
    anchor = committed or latest
    if anchor is None:
        return []
    keys = _folders(store, prefix)
    doomed = _doomed(store, prefix, keys, anchor, latest, keep, protect)
    for folder in doomed:
        manifest = f"{prefix}{folder}/{MANIFEST}"
        if manifest in keys[folder]:
            store.delete(manifest)  # first: no restore picks the folder while its files go
        for key in keys[folder]:
            if key != manifest:
                store.delete(key)
    return sorted(doomed, key=_folder_order)


def _doomed(store: ArtifactStore, prefix: str, keys: dict[str, list[str]], anchor: str, latest: str | None,
            keep: int, protect: Collection[str]) -> list[str]:
    """The folders :func:`prune_checkpoints` deletes, by its rules: of the intact ones older than ``anchor``,
    all but ``keep - 1`` (``latest`` and ``protect`` aside); the damaged ones below the oldest folder kept."""
    def intact(folder: str) -> bool:
        return _listed_whole(store, prefix, folder, keys)

    anchor_key = _folder_order(anchor)
    older = sorted((f for f in keys if _folder_order(f) < anchor_key), key=_folder_order, reverse=True)
    kept = [anchor] if intact(anchor) else []
    doomed: list[str] = []
    damaged: list[str] = []
    for folder in older:
        if folder == latest or folder in protect:
            continue
        if not intact(folder):
            damaged.append(folder)  # incomplete or damaged
        elif len(kept) < keep:
            kept.append(folder)
        else:
            doomed.append(folder)
    if not kept:
        return []  # nothing known good to measure "old" against
    oldest_kept = min(_folder_order(f)[0] for f in kept)
    return doomed + [f for f in damaged if _folder_order(f)[0] < oldest_kept]


# -- reading ------------------------------------------------------------------


def latest_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str) -> int | None:
    """The step a restore would start from, judged from a listing without downloading
    (file sizes are checked only by a restore); None when the trial has no checkpoint."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    pointer = _read_pointer(store, sweep_id, trial_id)
    keys = _folders(store, prefix)
    if pointer is not None and _listed_whole(store, prefix, pointer[1], keys):
        return pointer[0]
    for folder in _complete_folders(keys, prefix):
        if _listed_whole(store, prefix, folder, keys):
            return _folder_order(folder)[0]
    return None


def restore_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, directory: Path,
                       metrics: dict[str, float] | None = None) -> int | None:
    """Download the latest checkpoint into ``directory``; its step, or None when there is none.
    Files already in ``directory`` that it does not name are left alone; ``metrics``, when
    given, is filled with the metrics the manifest kept. Raises :class:`RetryableError` when
    writers keep pruning folders under it, and :class:`PermanentError` when every complete
    folder stays damaged (a corrupt ``MANIFEST``, or paths such as ``a`` and ``a/b``)."""
    directory = Path(directory)
    prefix = checkpoint_prefix(sweep_id, trial_id)
    listed: list[str] | None = store.list(prefix)
    if not listed:
        # Most trials start fresh: one listing says so, where reading the
        # pointer first took a failed GET and then the listing anyway. (S3
        # and MinIO list what was written, strongly consistent.)
        return None
    seen: tuple[Any, ...] | None = None
    problems: list[str] = []  # why folders could not be used (a corrupt MANIFEST)
    for _ in range(3):
        pointer = _read_pointer(store, sweep_id, trial_id)
        if pointer is not None and _restore_folder(store, prefix, pointer[1], directory, metrics, problems):
            return pointer[0]
        complete = _complete_folders(_folders(store, prefix, listed), prefix)
        listed = None  # a later pass lists again: writers may have moved on
        for folder in complete:
            if pointer is not None and folder == pointer[1]:
                continue  # just tried
            if _restore_folder(store, prefix, folder, directory, metrics, problems):
                return _folder_order(folder)[0]
        if not complete:
            return None
        # Every complete folder failed: either a writer pruned them while we
        # read (try again) or they are damaged for good (nothing moves).
        state = (pointer, tuple(complete))
        if state == seen:
            why = f": {problems[-1]}" if problems else f" is missing files its {MANIFEST} names"
            raise PermanentError(f"every checkpoint under {prefix} is damaged{why}")
        seen = state
    raise RetryableError(f"checkpoint for trial {trial_id} kept moving while restoring it")


def restore_known(store: ArtifactStore, sweep_id: str, trial_id: str, folder: str, directory: Path,
                  metrics: dict[str, float] | None = None) -> int | None:
    """:func:`restore_checkpoint` for a trial whose latest committed ``folder`` the
    caller knows (the planner's journal, ``TrialMessage.resume_from``), without a listing:
    the folder ``LATEST`` names (a commit newer than the caller heard of, or one copied
    into the trial's prefix, wins as in :func:`restore_checkpoint`), else ``folder``;
    only when neither is whole does it list, as :func:`restore_checkpoint` does."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    pointer = _read_pointer(store, sweep_id, trial_id)
    tried = []
    if pointer is not None:
        if _restore_folder(store, prefix, pointer[1], directory, metrics):
            return pointer[0]
        tried.append(pointer[1])
    if _FOLDER_NAME.match(folder) and folder not in tried and _restore_folder(store, prefix, folder, directory, metrics):
        return _folder_order(folder)[0]
    _log.warning("the recorded checkpoint is missing: listing the trial's checkpoints", folder=folder, trial_id=trial_id)
    return restore_checkpoint(store, sweep_id, trial_id, directory, metrics)


def _restore_folder(store: ArtifactStore, prefix: str, folder: str, directory: Path,
                    metrics: dict[str, float] | None = None, problems: list[str] | None = None) -> bool:
    """Restore one folder; False when it is incomplete or damaged (a corrupt
    ``MANIFEST``: why goes to ``problems``), so an older one may serve."""
    try:
        sizes, kept = read_manifest(store, prefix, folder)
    except NotFound:
        return False
    except PermanentError as e:
        if problems is not None:
            problems.append(str(e))
        return False
    if not _restore_files(store, f"{prefix}{folder}/{FILES}", sizes, directory):
        return False
    if metrics is not None:
        metrics.update(kept)
    return True


def _restore_files(store: ArtifactStore, prefix: str, sizes: dict[str, int], directory: Path) -> bool:
    """Download the files ``sizes`` names into a staging folder beside ``directory``, moved
    into it only once every one arrived whole; False (``directory`` untouched) if one did not."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.restore-", dir=directory.parent))
    try:
        if not download_files(store, prefix, sizes, staging):
            return False
        for rel in sizes:
            final = directory.joinpath(*PurePosixPath(rel).parts)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging.joinpath(*PurePosixPath(rel).parts), final)
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
