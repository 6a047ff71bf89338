"""The checkpoint and log layout in the artifact store, built only on the port.

A trial's checkpoints live under ``sweeps/<sweep>/trials/<trial>/checkpoints/``::

    000000000010/model.pt           one folder per step, zero-padded so that
    000000000010/opt/state.pt       key order is step order
    000000000020/...
    LATEST                          {"step": 20, "files": ["model.pt", ...]}

Uploading writes every file of a step first and the ``LATEST`` pointer last.
Writing the pointer is the commit: a node preempted mid-upload leaves the
previous ``LATEST`` in place, still naming a complete checkpoint, and the
half-written step folder is never read (restore fetches exactly the files the
pointer lists, so stale or partial files in a folder are harmless too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.errors import PermanentError, RetryableError

LATEST = "LATEST"
_STEP_FOLDER = re.compile(r"^(\d{12})/")


def checkpoint_prefix(sweep_id: str, trial_id: str) -> str:
    return f"sweeps/{sweep_id}/trials/{trial_id}/checkpoints/"


def step_prefix(sweep_id: str, trial_id: str, step: int) -> str:
    return f"{checkpoint_prefix(sweep_id, trial_id)}{step:012d}/"


def log_key(sweep_id: str, trial_id: str, attempt: int, stream: str) -> str:
    """Where one attempt's ``stdout``/``stderr`` log goes."""
    return f"sweeps/{sweep_id}/trials/{trial_id}/logs/attempt-{attempt}/{stream}.log"


# -- writing ------------------------------------------------------------------


def upload_checkpoint(
    store: ArtifactStore, sweep_id: str, trial_id: str, step: int, directory: Path, keep: int = 2
) -> str:
    """Upload ``directory`` as checkpoint ``step``, commit it, prune old ones.

    Returns the URI of the step folder. ``keep`` counts committed checkpoints
    kept, this one included.
    """
    if keep < 1:
        raise PermanentError(f"keep must be at least 1, got {keep}")
    files = upload_checkpoint_files(store, sweep_id, trial_id, step, directory)
    commit_checkpoint(store, sweep_id, trial_id, step, files)
    prune_checkpoints(store, sweep_id, trial_id, keep)
    return store.uri(step_prefix(sweep_id, trial_id, step))


def upload_checkpoint_files(store: ArtifactStore, sweep_id: str, trial_id: str, step: int, directory: Path) -> list[str]:
    """Upload every file under ``directory`` into the step folder, without
    committing; return their relative paths (sorted)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise PermanentError(f"checkpoint step must be a non-negative int, got {step!r}")
    directory = Path(directory)
    if not directory.is_dir():
        raise PermanentError(f"checkpoint directory {str(directory)!r} does not exist")
    files = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    if not files:
        # Committing an empty checkpoint would replace a good one with nothing.
        raise PermanentError(f"checkpoint directory {str(directory)!r} holds no files")
    prefix = step_prefix(sweep_id, trial_id, step)
    for rel in files:
        store.put_file(prefix + rel, directory / rel)
    return files


def commit_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, step: int, files: list[str]) -> None:
    """Point ``LATEST`` at ``step``: the commit, so call it only after every
    file of the step is uploaded."""
    pointer = json.dumps({"step": step, "files": files}, sort_keys=True).encode()
    store.put_bytes(checkpoint_prefix(sweep_id, trial_id) + LATEST, pointer)


def prune_checkpoints(store: ArtifactStore, sweep_id: str, trial_id: str, keep: int = 2) -> list[int]:
    """Delete step folders older than the ``keep`` newest committed ones; return
    the steps deleted.

    Only steps below the one ``LATEST`` names are candidates. Folders above it
    are uploads that were never committed (an attempt that died mid-upload, or
    one still writing); they are left alone and get overwritten or pruned once
    training passes that step again.
    """
    pointer = _read_pointer(store, sweep_id, trial_id)
    if pointer is None:
        return []
    latest = pointer[0]
    prefix = checkpoint_prefix(sweep_id, trial_id)
    by_step: dict[int, list[str]] = {}
    for key in store.list(prefix):
        match = _STEP_FOLDER.match(key[len(prefix) :])
        if match:
            by_step.setdefault(int(match.group(1)), []).append(key)
    older = sorted((s for s in by_step if s < latest), reverse=True)
    doomed = older[keep - 1 :]
    for step in doomed:
        for key in by_step[step]:
            store.delete(key)
    return sorted(doomed)


# -- reading ------------------------------------------------------------------


def latest_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str) -> int | None:
    """The step ``LATEST`` names, or None when the trial has no checkpoint."""
    pointer = _read_pointer(store, sweep_id, trial_id)
    return None if pointer is None else pointer[0]


def restore_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, directory: Path) -> int | None:
    """Download the latest checkpoint into ``directory``; return its step, or
    None when there is none. Files already in ``directory`` that the checkpoint
    does not name are left alone."""
    directory = Path(directory)
    for _ in range(3):
        pointer = _read_pointer(store, sweep_id, trial_id)
        if pointer is None:
            return None
        step, files = pointer
        prefix = step_prefix(sweep_id, trial_id, step)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            for rel in files:
                store.get_file(prefix + rel, directory.joinpath(*PurePosixPath(rel).parts))
        except NotFound:
            # A writer committed a newer step and pruned this one while we
            # were downloading: start over from the new pointer.
            if latest_checkpoint(store, sweep_id, trial_id) != step:
                continue
            raise PermanentError(f"checkpoint {prefix} is missing files that {LATEST} names") from None
        return step
    raise RetryableError(f"checkpoint for trial {trial_id} kept moving while restoring it")


def _read_pointer(store: ArtifactStore, sweep_id: str, trial_id: str) -> tuple[int, list[str]] | None:
    key = checkpoint_prefix(sweep_id, trial_id) + LATEST
    try:
        raw = store.get_bytes(key)
    except NotFound:
        return None
    try:
        data: Any = json.loads(raw)
        step, files = data["step"], data["files"]
        if not isinstance(step, int) or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError("wrong field types")
    except (ValueError, KeyError, TypeError) as e:
        raise PermanentError(f"checkpoint pointer {key} is corrupt: {e}") from e
    for rel in files:
        # The pointer comes from shared storage: never let it write outside
        # the restore directory.
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or any(p in ("..", ".") for p in parts):
            raise PermanentError(f"checkpoint pointer {key} names an unsafe path {rel!r}")
    return step, files
