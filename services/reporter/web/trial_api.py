"""What the trial page shows beside its metrics: events, the log tail, checkpoints.

The events are the trial's rows of the public view ``trial_journal``: a view,
not the table, so the dashboard runs as the ``spotsweep_reader`` role
(deploy/postgres/roles.sql). The log tail and the checkpoint list come from the
settings' artifact store, opened on first use; one that cannot be read gives
``store_error``, a line the page shows, never an error page: the database's
part of the page is still worth seeing.
"""

from __future__ import annotations

from typing import Any

from spotsweep.shared import log
from spotsweep.shared.artifacts import ArtifactStore, open_store
from spotsweep.shared.artifacts.browse import list_checkpoints, log_tail
from spotsweep.shared.db import Conn
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.settings import Settings

_log = log.get(__name__)
EVENTS = 200  # the newest events shown
LOG_LINES = 200
# What one line of the page says about an event: the view's columns that describe it.
_DETAIL = ("outcome", "resume_step", "step", "failure", "exit_code", "reason", "error")


def events(conn: Conn, trial_id: str, limit: int = EVENTS) -> list[dict[str, Any]]:
    """The trial's newest journaled events, oldest first: kind, attempt, time, agent and a few details."""
    rows = conn.execute(
        f"SELECT * FROM (SELECT kind, attempt, recorded_at, agent, {', '.join(_DETAIL)} FROM trial_journal"
        " WHERE trial_id = %s ORDER BY recorded_at DESC, message_id LIMIT %s) e ORDER BY recorded_at",
        (trial_id, limit)).fetchall()
    out = []
    for r in rows:
        detail = {k: r[k] for k in _DETAIL if r[k] not in (None, "")}
        if isinstance(detail.get("error"), str):
            detail["error"] = detail["error"][:300]
        out.append({"kind": r["kind"], "attempt": r["attempt"], "time": r["recorded_at"], "agent": r["agent"],
                    "detail": detail})
    return out


class TrialArtifacts:
    """A trial's log tail and checkpoints from the artifact store."""

    def __init__(self, store: ArtifactStore | None = None) -> None:
        self._store = store

    def store(self) -> ArtifactStore:
        if self._store is None:
            self._store = open_store(Settings())
        return self._store

    def body(self, sweep_id: str, trial_id: str) -> dict[str, Any]:
        """``log_attempt``, ``log_tail`` (lines), ``checkpoints`` (newest first) and
        ``store_error`` (None, or why the store could not be read)."""
        try:
            store = self.store()
            tail = log_tail(store, sweep_id, trial_id, lines=LOG_LINES)
            checkpoints = list_checkpoints(store, sweep_id, trial_id)
        except (SpotsweepError, OSError) as e:
            _log.warning("dashboard.store_unavailable", error=str(e), trial_id=trial_id)
            return {"log_attempt": None, "log_tail": [], "checkpoints": [],
                    "store_error": f"the artifact store cannot be read: {e}"}
        return {"log_attempt": tail.attempt, "log_tail": tail.lines, "store_error": None,
                "checkpoints": [{"step": c.step, "size": c.size, "files": c.files, "time": c.time,
                                 "complete": c.complete, "latest": c.latest} for c in checkpoints]}
