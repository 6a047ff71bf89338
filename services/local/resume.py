"""``spotsweep resume`` and local ``cancel``: a local sweep outlives the process that ran it.

A ``spotsweep run`` stopped by Ctrl-C (drained) or killed outright leaves its
sweep ``running`` in local mode's database. ``resume`` runs it on to its end
with the same planner, collector and agent code: trials that completed are
never run again; trials that were in flight go back to the outbox through
the planner's :func:`~.planner.orphans.requeue_orphans` (their broker died
with that process) and their next run restores the latest checkpoint. It
ends with the same leaderboard, CSV and exit codes as ``run``.

``cancel`` without ``SPOTSWEEP_DATABASE_URL`` cancels in the embedded database
through the planner's :func:`~.planner.store.cancel_sweep`. A ``run`` or
``resume`` of that sweep going on in another terminal sees the sweep
cancelled at its next poll (0.2 s), stops its trials and reports.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from spotsweep.services.local import run as local
from spotsweep.services.local import spool as local_spool
from spotsweep.services.local.interrupt import is_locked, quoted, run_here, sweep_lock
from spotsweep.services.planner import store as planner_store
from spotsweep.services.planner.orphans import requeue_orphans
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import configured
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import LocalSettings, Settings
from spotsweep.shared.spec import parse_spec

LOST = "its run ended with the `spotsweep run` (or `resume`) process that ran it; resumed by `spotsweep resume`"


def _sweep(db: Database, sweep_id: str, settings: Settings) -> dict[str, object]:
    """The sweep's row; an unknown id is a usage error (exit 2) naming where it looked."""
    with db.transaction() as conn:
        row = planner_store.get_sweep(conn, sweep_id)
    if row is None:
        where = "the database at SPOTSWEEP_DATABASE_URL" if settings.database_url else f"local mode's database ({settings.home})"
        raise PermanentError(f"no sweep with id {quoted(sweep_id)} in {where} (see `spotsweep status`)")
    return dict(row)


def resume(sweep_id: str, settings: LocalSettings, workers: int, csv: Path | None, console: Console | None = None,
           dashboard: int | None = None) -> int:
    """Finish an interrupted local sweep; a sweep that already ended is said so (exit 0)."""
    console = console or Console(stderr=True)
    db = configured(settings)
    db.migrate()  # local mode's database is this user's: brought up to date, as `run` does
    row = _sweep(db, sweep_id, settings)
    if not run_here(settings, sweep_id):  # submitted to a planner: resuming here would run its trials in flight twice
        raise PermanentError(f"sweep {quoted(sweep_id)} was not started by `spotsweep run` with this SPOTSWEEP_HOME "
                             f"({settings.home}): a sweep submitted to the planner goes on by itself (its planner requeues "
                             "what a lost agent held), and `resume` would run its trials a second time here")
    extending = row["state"] == "completed" and bool(local_spool.waiting(settings.home, sweep_id))
    if row["state"] != "running" and not extending:
        console.print(f"sweep {sweep_id} already ended: {row['state']}; nothing to resume "
                      f"(see `spotsweep report {sweep_id}`)")
        return ExitCode.OK
    with sweep_lock(settings.home, sweep_id):
        spec = parse_spec(row["spec"])  # the sweep's latest version (the planner applies a waiting `extend`)
        with db.transaction() as conn:
            waiting, stopped, running = requeue_orphans(conn, sweep_id, LOST)
        console.print(_resuming(sweep_id, waiting, stopped, running) if not extending
                      else f"extending sweep {sweep_id}: `spotsweep extend` left an extension to run")
        return local.serve(spec, settings, workers, db, sweep_id, csv, console, dashboard)


def _resuming(sweep_id: str, waiting: int, stopped: int, running: int) -> str:
    """What ``resume`` starts again: trials a drain stopped, runs that died with the process, trials never started."""
    parts = [f"{stopped} stopped by the drain" if stopped else "", f"{running} whose run died with the process" if running else "",
             f"{waiting} not started yet" if waiting else ""]
    said = ", ".join(p for p in parts if p) or "none"
    return (f"resuming sweep {sweep_id}: {waiting + stopped + running} trial(s) in flight when it stopped ({said}); "
            "those that ran resume from their last checkpoint")


def cancel(sweep_id: str, settings: Settings) -> str:
    """Cancel a sweep in local mode's database (no RabbitMQ): what the planner does on a cancel."""
    db = configured(settings)
    db.migrate()
    before = _sweep(db, sweep_id, settings)["state"]
    if before != "running":
        return f"sweep {sweep_id} already ended: {before}; nothing to cancel"
    with db.transaction() as conn:
        n = planner_store.cancel_sweep(conn, sweep_id)
    tail = "; the process running it stops its trials within a moment" if is_locked(settings.home, sweep_id) else ""
    return f"sweep {sweep_id} cancelled ({n or 0} trial(s) not yet ended){tail}"
