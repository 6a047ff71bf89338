"""Checkpoint retention: which of a trial's checkpoints stay in the store.

The spec's ``checkpoints: {keep: last | best | all}`` (default ``last``)
says what a finished trial leaves behind; the agent applies it, because it
holds the store and knows when an attempt ends (the planner only calls
:func:`delete_all` for a trial successive halving pruned after its run ended):

* while a trial runs, after each commit, the latest complete checkpoint and
  one older one (a fallback should the latest turn out damaged) are kept, and
  with ``best`` also the checkpoint with the best objective so far;
* when an attempt ends, ``last`` keeps only the latest complete checkpoint,
  ``best`` the latest and the best one (the latest is what a retry, a resume
  after preemption or a promotion by successive halving starts from), ``all``
  keeps everything;
* a trial pruned by early stopping while it runs loses every checkpoint
  (``last`` and ``best``): it is over for good and nothing resumes it.

"Best" is read from each checkpoint's ``MANIFEST``, which keeps the last
value of every metric the trial had reported when it saved the checkpoint:
the checkpoint whose objective value there is best (ties: the newest) is the
one nearest the trial's best value. A checkpoint saved before any objective
value, or at a NaN, is never "best".

Deletion goes through :func:`~.checkpoints.prune_checkpoints`, crash-safe by
its rules, so a trial that may resume always keeps a complete checkpoint. Only
a pruned trial, which never resumes, has everything deleted; a crash in the
middle leaves some of its keys behind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from spotsweep.shared.artifacts.checkpoint_layout import (LATEST, MANIFEST, _complete_folders, _folder_order, _folders,
                                                          checkpoint_prefix, read_manifest)
from spotsweep.shared.artifacts.checkpoints import prune_checkpoints
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.errors import PermanentError

Keep = Literal["last", "best", "all"]
RUNNING_KEEP = 2  # complete checkpoints kept at or below the newest while a trial runs


def best_folder(values: Mapping[str, float | None], mode: str) -> str | None:
    """The folder whose objective value is best (``min`` or ``max``), the newest
    of equal ones; None when no folder has a finite value. Pure."""
    finite = [(v, f) for f, v in values.items() if v is not None and math.isfinite(v)]
    if not finite:
        return None
    sign = 1.0 if mode == "min" else -1.0
    newest_first = sorted(finite, key=lambda t: _folder_order(t[1]), reverse=True)
    return min(newest_first, key=lambda t: sign * t[0])[1]  # min() keeps the first of equal ones


def objective_values(store: ArtifactStore, sweep_id: str, trial_id: str, metric: str) -> dict[str, float | None]:
    """Each complete folder's objective value as its ``MANIFEST`` kept it (None: none kept, or unreadable)."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    out: dict[str, float | None] = {}
    for folder in _complete_folders(_folders(store, prefix), prefix):
        try:
            out[folder] = read_manifest(store, prefix, folder)[1].get(metric)
        except (NotFound, PermanentError):
            out[folder] = None
    return out


def _protected(store: ArtifactStore, sweep_id: str, trial_id: str, keep: Keep, metric: str, mode: str) -> set[str]:
    if keep != "best":
        return set()
    best = best_folder(objective_values(store, sweep_id, trial_id, metric), mode)
    return {best} if best else set()


def after_commit(store: ArtifactStore, sweep_id: str, trial_id: str, folder: str, keep: Keep, metric: str,
                 mode: str) -> list[str]:
    """Prune after committing ``folder`` while the trial runs; the folders deleted."""
    if keep == "all":
        return []
    protect = _protected(store, sweep_id, trial_id, keep, metric, mode)
    return prune_checkpoints(store, sweep_id, trial_id, RUNNING_KEEP, committed=folder, protect=protect)


def at_end(store: ArtifactStore, sweep_id: str, trial_id: str, keep: Keep, metric: str, mode: str) -> list[str]:
    """Apply the policy when an attempt has ended (its process is gone); the folders deleted."""
    if keep == "all":
        return []
    protect = _protected(store, sweep_id, trial_id, keep, metric, mode)
    return prune_checkpoints(store, sweep_id, trial_id, 1, protect=protect)


def delete_all(store: ArtifactStore, sweep_id: str, trial_id: str) -> int:
    """Delete every checkpoint of a trial that will never resume (pruned);
    the number of keys deleted. ``MANIFEST`` files go first, ``LATEST`` last."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    keys = store.list(prefix)
    order = sorted(keys, key=lambda k: (k.endswith("/" + MANIFEST) is False, k == prefix + LATEST, k))
    for key in order:
        store.delete(key)
    return len(order)
