"""``spotsweep logs`` and ``spotsweep checkpoint``: a trial's artifacts from the store.

Both find the trial in the results database (:mod:`.trial_lookup`: an id,
or a name within ``--sweep``) and read the artifact store the settings name
(``SPOTSWEEP_S3_*``, else local mode's directory under ``SPOTSWEEP_HOME``),
so they work after the trial's node is gone. Logs are the per-attempt copies
the agent uploads every ``SPOTSWEEP_LOG_UPLOAD_SECONDS`` while the trial
runs and once more when it ends; ``--follow`` polls them until the trial is over.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import BinaryIO

from spotsweep.services.reporter.safe import printable
from spotsweep.services.trial_lookup import TERMINAL, find_trial, trial_state
from spotsweep.shared.artifacts import ArtifactStore, open_store
from spotsweep.shared.artifacts.browse import STREAMS, download_checkpoint, log_attempts, read_log
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

ANCHOR = 4096  # bytes of what was shown last that locate it again in a log cut at its front
FOLLOW_SECONDS = 2.0


def fresh(seen: bytes, now: bytes) -> bytes:
    """What of the log ``now`` was not in ``seen`` (the same log, fetched before).
    A bounded log loses its front as it grows (``limits.log_bytes``): then the
    end of ``seen`` is found in ``now`` and what follows it is new. Pure."""
    if now.startswith(seen):
        return now[len(seen):]
    anchor = seen[-ANCHOR:]
    at = now.rfind(anchor) if anchor else -1
    return now[at + len(anchor):] if at >= 0 else now


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


def logs(trial: str, sweep: str | None, attempt: int | None, follow: bool, settings: Settings,
         out: BinaryIO | None = None, poll: float = FOLLOW_SECONDS, db: Database | None = None) -> int:
    """Print a trial's stdout and stderr (the newest attempt with logs, or ``attempt``)."""
    from spotsweep.services.commands import database

    db = db or database(settings)
    store = open_store(settings)
    stream = out or sys.stdout.buffer
    printer = Printer(stream, escape=out is None and sys.stdout.isatty())
    with db.transaction() as conn:
        row = find_trial(conn, trial, sweep)
    sweep_id, trial_id = row["sweep_id"], row["trial_id"]
    if attempt is not None and not follow:
        known = log_attempts(store, sweep_id, trial_id)
        if attempt not in known:
            have = ", ".join(map(str, known)) or "none yet"
            raise PermanentError(f"--attempt: trial {row['trial_name']} has no log of attempt {attempt} "
                                 f"(attempts with logs: {have})")
    seen: dict[str, bytes] = {}
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
        time.sleep(poll)


def _print_new(store: ArtifactStore, sweep_id: str, trial_id: str, attempt: int, seen: dict[str, bytes],
               printer: Printer) -> None:
    for name in STREAMS:
        data = read_log(store, sweep_id, trial_id, attempt, name)
        if data is None:
            continue
        printer.write(f"{name} (attempt {attempt})", fresh(seen.get(name, b""), data))
        seen[name] = data


def checkpoint(trial: str, sweep: str | None, out: Path, step: int | None, settings: Settings,
               db: Database | None = None) -> int:
    """Download the trial's latest complete checkpoint (or the one of ``step``) into ``out``."""
    from spotsweep.services.commands import database

    db = db or database(settings)
    with db.transaction() as conn:
        row = find_trial(conn, trial, sweep)
    got = download_checkpoint(open_store(settings), row["sweep_id"], row["trial_id"], out, step)
    print(f"checkpoint of step {got} of trial {printable(row['trial_name'])} ({row['trial_id']}) is in {out}")
    return ExitCode.OK
