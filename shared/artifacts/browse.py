"""Reading a trial's artifacts for people: its checkpoints and its logs.

What ``spotsweep logs``, ``spotsweep checkpoint``, the Python API's
``Sweep.checkpoint`` and the dashboard's trial page share. Checkpoints are
read with the rules of :mod:`.checkpoints` (only complete, intact folders;
the latest is the one a resume would use); logs are the per-attempt files
the agent uploads while the trial runs and when it ends
(:func:`~.checkpoint_layout.log_key`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from spotsweep.shared.artifacts.checkpoint_layout import _FOLDER, MANIFEST, _folder_order, _read_pointer, checkpoint_prefix, log_key
from spotsweep.shared.artifacts.checkpoints import _restore_folder, restore_checkpoint
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound
from spotsweep.shared.errors import PermanentError

STREAMS = ("stdout", "stderr")
_ATTEMPT = re.compile(r"logs/attempt-(\d+)/(stdout|stderr)\.log$")


class NoCheckpoint(PermanentError, LookupError):
    """The trial has no complete checkpoint (at the step asked for)."""


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    folder: str
    size: int  # bytes of the files uploaded so far
    files: int
    time: datetime | None  # when its MANIFEST was written (None: incomplete, or the store cannot tell)
    complete: bool  # has its MANIFEST: a restore may use it
    latest: bool  # the folder LATEST names


def list_checkpoints(store: ArtifactStore, sweep_id: str, trial_id: str) -> list[CheckpointInfo]:
    """Every checkpoint folder of a trial, newest first, from one listing
    (plus ``LATEST``). Incomplete folders (an upload in progress or cut off) are listed too."""
    prefix = checkpoint_prefix(sweep_id, trial_id)
    folders: dict[str, list[tuple[str, int, datetime | None]]] = {}
    for obj in store.list_info(prefix):
        match = _FOLDER.match(obj.key[len(prefix):])
        if match:
            folders.setdefault(match.group(0)[:-1], []).append((obj.key, obj.size or 0, obj.modified))
    try:
        pointer = _read_pointer(store, sweep_id, trial_id)
    except PermanentError:
        pointer = None  # a corrupt LATEST: restores fall back to the newest complete folder
    out = []
    for folder, objs in folders.items():
        manifest = f"{prefix}{folder}/{MANIFEST}"
        stamp = next((t for k, _, t in objs if k == manifest), None)
        complete = any(k == manifest for k, _, _ in objs)
        data = [(k, n) for k, n, _ in objs if k != manifest]
        out.append(CheckpointInfo(step=_folder_order(folder)[0], folder=folder, size=sum(n for _, n in data),
                                  files=len(data), time=stamp, complete=complete,
                                  latest=pointer is not None and pointer[1] == folder))
    return sorted(out, key=lambda c: _folder_order(c.folder), reverse=True)


def download_checkpoint(store: ArtifactStore, sweep_id: str, trial_id: str, out: Path, step: int | None = None) -> int:
    """Download the trial's latest complete checkpoint (or the one of ``step``)
    into ``out``; its step. Raises :class:`NoCheckpoint` naming the steps there
    are when there is none (at that step)."""
    if step is None:
        found = restore_checkpoint(store, sweep_id, trial_id, Path(out))
        if found is None:
            raise NoCheckpoint(f"trial {trial_id} has no complete checkpoint")
        return found
    infos = list_checkpoints(store, sweep_id, trial_id)
    prefix = checkpoint_prefix(sweep_id, trial_id)
    problems: list[str] = []
    for info in infos:  # newest upload of that step first
        if info.step == step and info.complete and _restore_folder(store, prefix, info.folder, Path(out), None, problems):
            return step
    steps = sorted({i.step for i in infos if i.complete})
    there = ", ".join(map(str, steps)) if steps else "none"
    why = f" ({problems[-1]})" if problems else ""
    raise NoCheckpoint(f"trial {trial_id} has no complete checkpoint at step {step}{why}; steps there are: {there}")


def log_attempts(store: ArtifactStore, sweep_id: str, trial_id: str) -> list[int]:
    """The attempts that uploaded a log, in order."""
    found = {int(m.group(1)) for k in store.list(f"sweeps/{sweep_id}/trials/{trial_id}/logs/")
             if (m := _ATTEMPT.search(k))}
    return sorted(found)


@dataclass(frozen=True)
class LogTail:
    attempt: int | None  # None: the trial uploaded no log yet
    lines: list[str]  # stdout's last lines, then stderr's, as text (undecodable bytes replaced)


TAIL_BYTES_PER_LINE = 1024  # a tail of N lines reads at most N KiB of each stream
LINE_CHARS = 2000  # a longer line is cut, ending in " [...]"


def _tail_lines(store: ArtifactStore, key: str, lines: int) -> list[str]:
    """A log's last lines from a ranged read of its end (never the whole log: up to 64 MiB);
    a line the read starts inside of is dropped, unless it is all there is."""
    try:
        data, size = store.get_tail(key, lines * TAIL_BYTES_PER_LINE)
    except NotFound:
        return []
    if len(data) < size and b"\n" in data[:-1]:
        data = data[data.index(b"\n") + 1:]  # starts mid-line
    return [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [...]"
            for line in data.decode("utf-8", "replace").splitlines()[-lines:]]


def log_tail(store: ArtifactStore, sweep_id: str, trial_id: str, attempt: int | None = None,
             lines: int = 200) -> LogTail:
    """The last ``lines`` lines of an attempt's stdout and stderr together (the
    newest attempt with a log by default), each stream under a ``==> name <==`` line.
    Reads at most ``lines`` KiB of each stream, from its end, so lines longer than
    1 KiB on average leave fewer lines."""
    if attempt is None:
        attempts = log_attempts(store, sweep_id, trial_id)
        if not attempts:
            return LogTail(None, [])
        attempt = attempts[-1]
    text = {stream: _tail_lines(store, log_key(sweep_id, trial_id, attempt, stream), lines) for stream in STREAMS}
    # as limits.log_bytes shares bytes: half each, and what one does not use the other may
    err = text["stderr"][-max(lines // 2, lines - len(text["stdout"])):] if text["stderr"] else []
    std = text["stdout"][-(lines - len(err)):] if text["stdout"] and lines > len(err) else []
    out: list[str] = []
    for stream, kept in (("stdout", std), ("stderr", err)):
        if text[stream]:
            out += [f"==> {stream} <==", *kept]
    return LogTail(attempt, out)
