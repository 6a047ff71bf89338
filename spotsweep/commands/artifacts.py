"""``spotsweep logs`` and ``spotsweep checkpoint``: a trial's artifacts from the store.

Both find the trial in the results database (:mod:`.trial_lookup`: an id,
or a name within ``--sweep``) and read the artifact store the settings name
(``SPOTSWEEP_S3_*``, else local mode's directory under ``SPOTSWEEP_HOME``),
so they work after the trial's node is gone. Logs are the per-attempt copies
the agent uploads every ``SPOTSWEEP_LOG_UPLOAD_SECONDS`` while the trial
runs and once more when it ends; ``--follow`` polls them until the trial is over.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spotsweep.commands import command, positive, step
from spotsweep.commands.trial_lookup import TERMINAL, find_trial, trial_state
from spotsweep.services.reporter.safe import printable
from spotsweep.shared.artifacts import ArtifactStore, open_store
from spotsweep.shared.artifacts.browse import STREAMS, download_checkpoint, log_attempts
from spotsweep.shared.artifacts.checkpoint_layout import log_key
from spotsweep.shared.artifacts.port import NotFound
from spotsweep.shared.db.embedded import for_reading
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

ANCHOR = 4096  # bytes of what was shown last that locate it again in a log cut at its front
FOLLOW_SECONDS = 2.0
WINDOW = 1 << 20  # the first tail read when a log's front was cut; grown 4x until the anchor is in it


@dataclass(frozen=True)
class Seen:
    """How far a followed log was shown: its size then and its last :data:`ANCHOR` bytes."""

    size: int
    tail: bytes


def read_new(store: ArtifactStore, key: str, seen: Seen | None) -> tuple[bytes, Seen]:
    """What log ``key`` holds past ``seen``, reading only that (ranged GETs), and the new
    :class:`Seen`. Raises :class:`NotFound` while there is no log.

    ``--follow`` polls every few seconds a log that can reach ``limits.log_bytes``
    (64 MiB): reading it whole each time cost that much per poll. A log grows at its
    end, so the bytes from the last anchor on are read; one whose front the agent cut
    (the bound) moved the anchor towards its start by an unknown amount, so growing
    windows at its end are read until the anchor is in one (usually the first)."""
    if seen is None:
        data = store.get_bytes(key)
        return data, Seen(len(data), data[-ANCHOR:])
    start = seen.size - len(seen.tail)
    data, total = _read_from(store, key, start)
    if data.startswith(seen.tail):
        new = data[len(seen.tail):]
        return new, Seen(start + len(data), (seen.tail + new)[-ANCHOR:])
    window = WINDOW
    while True:
        begin = max(0, total - window)
        chunk, total = _read_from(store, key, begin)
        at = chunk.rfind(seen.tail) if seen.tail else -1
        if at >= 0 or begin == 0:  # found, or the whole log read: without the anchor all of it is new
            new = chunk[at + len(seen.tail):] if at >= 0 else chunk
            return new, Seen(begin + len(chunk), chunk[-ANCHOR:])
        window *= 4


def _read_from(store: ArtifactStore, key: str, offset: int, chunk: int = 8 << 20) -> tuple[bytes, int]:
    """``key`` from ``offset`` to its end, in ranged reads of ``chunk`` bytes, and its size."""
    parts: list[bytes] = []
    while True:
        data, total = store.get_range(key, offset, chunk)
        parts.append(data)
        offset += len(data)
        if not data or offset >= total:
            return b"".join(parts), total


class Printer:
    """Writes log bytes to ``out`` under a ``==> stream (attempt N) <==`` header
    whenever the stream changes; on a terminal, control characters are escaped."""

    def __init__(self, out: BinaryIO, escape: bool) -> None:
        self.out, self.escape, self.last = out, escape, ""

    def write(self, what: str, data: bytes) -> None:
        if not data:
            return
        if what != self.last:
            self.out.write(f"{chr(10) if self.last else ''}==> {what} <==\n".encode())
            self.last = what
        if self.escape:
            data = printable(data.decode("utf-8", "replace"), newlines=True).encode()
        self.out.write(data)
        self.out.flush()


def trial_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial", help="a trial id, or a trial name (within --sweep)")
    p.add_argument("--sweep", help="the sweep (id, or name: its newest sweep) whose trial name TRIAL is")


def _logs_args(p: argparse.ArgumentParser) -> None:
    trial_args(p)
    p.add_argument("--attempt", type=positive, help="this attempt's logs (default: the newest attempt with logs)")
    p.add_argument("--follow", "-f", action="store_true", help="print what the trial writes until it ends "
                                                                "(the store is at most SPOTSWEEP_LOG_UPLOAD_SECONDS behind)")


@command("logs", _logs_args)
def logs(args: argparse.Namespace, settings: Settings) -> int:
    """Print a trial's stdout and stderr (the newest attempt with logs, or ``--attempt``); ``--follow``: until it ends."""
    db, store, attempt, follow = for_reading(settings), open_store(settings), args.attempt, args.follow
    printer = Printer(sys.stdout.buffer, escape=sys.stdout.isatty())
    with db.transaction() as conn:
        row = find_trial(conn, args.trial, args.sweep)
    sweep_id, trial_id = row["sweep_id"], row["trial_id"]
    if attempt is not None and not follow:
        known = log_attempts(store, sweep_id, trial_id)
        if attempt not in known:
            have = ", ".join(map(str, known)) or "none yet"
            raise PermanentError(f"--attempt: trial {row['trial_name']} has no log of attempt {attempt} "
                                 f"(attempts with logs: {have})")
    seen: dict[str, Seen] = {}
    shown: int | None = None
    while True:
        if follow:
            with db.transaction() as conn:
                state, _ = trial_state(conn, trial_id)
        target = attempt if attempt is not None else max(log_attempts(store, sweep_id, trial_id), default=None)
        if target != shown:
            seen, shown = {}, target
        if target is not None:
            _print_new(store, sweep_id, trial_id, target, seen, printer)
        if not follow:
            if target is None:
                # An ended trial's logs were uploaded before its end was reported: none means it printed nothing.
                why = "has no logs: it printed nothing, or never ran" if row["state"] in TERMINAL else "has no logs yet"
                print(f"trial {printable(row['trial_name'])} ({trial_id}) {why} (state {row['state']})", file=sys.stderr)
            return ExitCode.OK
        if state in TERMINAL:  # read before the logs: the agent uploads them before it reports the end
            return ExitCode.OK
        time.sleep(FOLLOW_SECONDS)


def _print_new(store: ArtifactStore, sweep_id: str, trial_id: str, attempt: int, seen: dict[str, Seen],
               printer: Printer) -> None:
    for name in STREAMS:
        try:
            new, seen[name] = read_new(store, log_key(sweep_id, trial_id, attempt, name), seen.get(name))
        except NotFound:
            continue
        printer.write(f"{name} (attempt {attempt})", new)


def _checkpoint_args(p: argparse.ArgumentParser) -> None:
    trial_args(p)
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to download into")
    p.add_argument("--step", type=step, help="the checkpoint of this step (default: the latest complete one)")


@command("checkpoint", _checkpoint_args)
def checkpoint(args: argparse.Namespace, settings: Settings) -> int:
    """Download the trial's latest complete checkpoint (or the one of ``--step``) into ``--out``."""
    with for_reading(settings).transaction() as conn:
        row = find_trial(conn, args.trial, args.sweep)
    got = download_checkpoint(open_store(settings), row["sweep_id"], row["trial_id"], args.out, args.step)
    print(f"checkpoint of step {got} of trial {printable(row['trial_name'])} ({row['trial_id']}) is in {args.out}")
    return ExitCode.OK
