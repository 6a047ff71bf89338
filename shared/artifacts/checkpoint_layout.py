"""The checkpoint layout's names and how to read it from a listing; the
layout itself and the rules writers and readers follow are described in
:mod:`spotsweep.shared.artifacts.checkpoints`, which re-exports the public names."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.errors import PermanentError

LATEST = "LATEST"
MANIFEST = "MANIFEST"
FILES = "files/"
# ``<step>-<token>``: the step zero-padded, then a token unique to the upload.
_FOLDER = re.compile(r"^(\d{12})-([0-9a-f]{1,32})/")
_FOLDER_NAME = re.compile(r"^\d{12}-[0-9a-f]{1,32}$")


def checkpoint_prefix(sweep_id: str, trial_id: str) -> str:
    return f"sweeps/{sweep_id}/trials/{trial_id}/checkpoints/"


def folder_prefix(sweep_id: str, trial_id: str, folder: str) -> str:
    """The prefix of one upload's folder (``<step>-<token>/``)."""
    return f"{checkpoint_prefix(sweep_id, trial_id)}{folder}/"


def log_key(sweep_id: str, trial_id: str, attempt: int, stream: str) -> str:
    """Where one attempt's ``stdout``/``stderr`` log goes."""
    return f"sweeps/{sweep_id}/trials/{trial_id}/logs/attempt-{attempt}/{stream}.log"


def loss_prefix(sweep_id: str, trial_id: str, attempt: int) -> str:
    """One empty marker per delivery of an attempt lost with its agent (see ``uploads.record_loss``)."""
    return f"sweeps/{sweep_id}/trials/{trial_id}/losses/attempt-{attempt}/"


def _folder_order(folder: str) -> tuple[int, str]:
    """Sort key: step, then token."""
    step, _, token = folder.partition("-")
    return int(step), token


def _folders(store: ArtifactStore, prefix: str, listed: list[str] | None = None) -> dict[str, list[str]]:
    """Every checkpoint folder under ``prefix`` with its keys (from ``listed``, a listing just made, if given)."""
    found: dict[str, list[str]] = {}
    for key in store.list(prefix) if listed is None else listed:
        match = _FOLDER.match(key[len(prefix) :])
        if match:
            found.setdefault(match.group(0)[:-1], []).append(key)
    return found


def _listed_whole(store: ArtifactStore, prefix: str, folder: str, keys: dict[str, list[str]]) -> bool:
    """Whether ``folder`` has a ``MANIFEST`` and the listing ``keys`` holds
    every file it names (an unreadable MANIFEST counts as not whole)."""
    if f"{prefix}{folder}/{MANIFEST}" not in keys.get(folder, ()):
        return False
    try:
        sizes = read_manifest(store, prefix, folder)[0]
    except (NotFound, PermanentError):
        return False
    listed = set(keys[folder])
    return all(f"{prefix}{folder}/{FILES}{rel}" in listed for rel in sizes)


def _complete_folders(folders: dict[str, list[str]], prefix: str) -> list[str]:
    """Folders with a ``MANIFEST``, newest first."""
    complete = [f for f, keys in folders.items() if f"{prefix}{f}/{MANIFEST}" in keys]
    return sorted(complete, key=_folder_order, reverse=True)


def _safe_paths(files: list[str], key: str) -> None:
    for rel in files:
        # Paths come from shared storage: never let one write outside the
        # restore directory.
        if not isinstance(rel, str):
            raise PermanentError(f"checkpoint {key} names a path that is not a string: {rel!r}")
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or any(p in ("..", ".") for p in parts):
            raise PermanentError(f"checkpoint {key} names an unsafe path {rel!r}")
    # A file cannot also be a folder: "a" and "a/b" cannot both be restored.
    names = {PurePosixPath(rel) for rel in files}
    for path in sorted(names):
        for parent in path.parents:
            if parent in names:
                raise PermanentError(f"checkpoint {key} names both {str(parent)!r} and {str(path)!r}: a file cannot "
                                     "also be a folder, so the checkpoint cannot be restored")


def read_manifest(store: ArtifactStore, prefix: str, folder: str) -> tuple[dict[str, int], dict[str, float]]:
    """A folder's ``MANIFEST``: its files with their sizes, and the metrics the
    trial had reported when it took the checkpoint (empty for older uploads).
    NotFound if the folder has no manifest."""
    sizes, metrics, _ = read_manifest_hashes(store, prefix, folder)
    return sizes, metrics


def read_manifest_hashes(store: ArtifactStore, prefix: str, folder: str,
                         scheme: str | None = None) -> tuple[dict[str, int], dict[str, float], dict[str, str]]:
    """:func:`read_manifest` and each file's content hash, when the MANIFEST has them in
    ``scheme`` (an older upload has none: empty; so is a MANIFEST of another scheme)."""
    key = f"{prefix}{folder}/{MANIFEST}"
    raw = store.get_bytes(key)
    try:
        data: Any = json.loads(raw)
        sizes = data["files"]
        if not isinstance(sizes, dict) or not sizes:
            raise TypeError("files is not a non-empty object")
        if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in sizes.items()):
            raise TypeError("wrong field types")
        metrics = data.get("metrics") or {}
        if not isinstance(metrics, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in metrics.items()):
            raise TypeError("metrics is not an object of numbers")
    except (ValueError, KeyError, TypeError) as e:
        raise PermanentError(f"checkpoint manifest {key} is corrupt: {e}") from e
    _safe_paths(list(sizes), key)
    hashes = data.get("hashes")
    if scheme is None or data.get("hash") != scheme or not isinstance(hashes, dict):
        hashes = {}  # hashes only save uploads: unusable ones are ignored, never an error
    return sizes, {k: float(v) for k, v in metrics.items()}, {k: v for k, v in hashes.items() if isinstance(v, str)}


def _read_pointer(store: ArtifactStore, sweep_id: str, trial_id: str) -> tuple[int, str] | None:
    """``(step, folder)`` as ``LATEST`` names them; None when there is no ``LATEST``."""
    key = checkpoint_prefix(sweep_id, trial_id) + LATEST
    try:
        raw = store.get_bytes(key)
    except NotFound:
        return None
    try:
        data: Any = json.loads(raw)
        step = data["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise TypeError("wrong step")
        folder = data["folder"]
        if not isinstance(folder, str) or not _FOLDER_NAME.match(folder) or _folder_order(folder)[0] != step:
            raise ValueError(f"bad folder {folder!r}")
    except (ValueError, KeyError, TypeError) as e:
        raise PermanentError(f"checkpoint pointer {key} is corrupt: {e}") from e
    return step, folder
