"""Finding a trial the way a person names it: its id, or its name within a sweep.

Shared by ``spotsweep logs``, ``spotsweep checkpoint`` and the Python API's
``Sweep.checkpoint``. Reads only the public view ``trial_results`` (and the
sweep's header, as the reporter does).
"""

from __future__ import annotations

from typing import Any

from spotsweep.services.reporter.web import queries
from spotsweep.shared.db import Conn
from spotsweep.shared.errors import PermanentError

TERMINAL = ("completed", "failed", "cancelled", "pruned")
_COLUMNS = "sweep_id, sweep_name, trial_id, trial_name, state, attempts"


class UnknownTrial(PermanentError, LookupError):
    """No trial (or sweep) has that id or name."""


def find_trial(conn: Conn, trial: str, sweep: str | None = None) -> dict[str, Any]:
    """The ``trial_results`` row (sweep_id, sweep_name, trial_id, trial_name,
    state, attempts) of trial ``trial``: an id, or a name within ``sweep`` (a
    sweep id, or a name: its newest sweep). Without ``sweep`` a name must be
    unique over every sweep."""
    if sweep is not None:
        header = queries.find_sweep(conn, sweep)
        if header is None:
            raise UnknownTrial(f"--sweep: no sweep has the id or name {sweep!r}")
        row = conn.execute(f"SELECT {_COLUMNS} FROM trial_results WHERE sweep_id = %s AND (trial_id = %s OR trial_name = %s)"
                           " ORDER BY trial_id = %s DESC LIMIT 1", (header["sweep_id"], trial, trial, trial)).fetchone()
        if row is None:
            raise UnknownTrial(f"no trial has the id or name {trial!r} in sweep {header['name']} ({header['sweep_id']})")
        return dict(row)
    row = conn.execute(f"SELECT {_COLUMNS} FROM trial_results WHERE trial_id = %s", (trial,)).fetchone()
    if row is not None:
        return dict(row)
    rows = conn.execute(f"SELECT {_COLUMNS} FROM trial_results WHERE trial_name = %s ORDER BY sweep_id LIMIT 6",
                        (trial,)).fetchall()
    if not rows:
        raise UnknownTrial(f"no trial has the id or name {trial!r} (give --sweep to look for a name in one sweep)")
    if len(rows) > 1:
        sweeps = ", ".join(r["sweep_id"] for r in rows[:5])
        raise UnknownTrial(f"trial name {trial!r} is in more than one sweep ({sweeps}{', ...' if len(rows) > 5 else ''}):"
                           " give --sweep")
    return dict(rows[0])


def trial_state(conn: Conn, trial_id: str) -> tuple[str, int]:
    """A trial's state and current attempt, now."""
    row = conn.execute("SELECT state, attempts FROM trial_results WHERE trial_id = %s", (trial_id,)).fetchone()
    if row is None:
        raise UnknownTrial(f"trial {trial_id!r} is gone from the results database")
    return row["state"], int(row["attempts"])
