"""An embedded PostgreSQL for local mode, via the ``pgserver`` package.

pgserver ships PostgreSQL binaries in its wheel and runs a private server on
a Unix socket in a data directory we own, so ``spotsweep run`` needs no
database set up and the SQL views are the same as in production. The server
is stopped when the last user of the directory exits, however it exits: a
watchdog process per user (:mod:`.pg_watchdog`) stops it when its user was
killed outright, which pgserver alone does not.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotsweep.shared.db import Database, pg_watchdog
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.tls import pg_options

if TYPE_CHECKING:
    from spotsweep.shared.settings import Settings

_servers: dict[Path, Any] = {}
_watchdogs: dict[Path, int] = {}  # data dir -> the write end of its watchdog's pipe, open while we live


def embedded_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded server in ``data_dir``; return its URL."""
    data_dir = data_dir.expanduser().resolve()
    if data_dir not in _servers:
        # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset (any
        # container or CI job); the fallback it picks is fine.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver  # deferred: local mode's alone; a command with SPOTSWEEP_DATABASE_URL never loads it
        data_dir.mkdir(parents=True, exist_ok=True)
        # Watched before it starts: a kill in between still stops it.
        _watchdogs.setdefault(data_dir, pg_watchdog.start(data_dir))
        with pg_watchdog.locked():
            # Users killed earlier never left pgserver's list, and pgserver stops
            # the server only when its last listed user exits: forget them.
            pg_watchdog.prune(data_dir)
        try:
            _servers[data_dir] = pgserver.get_server(data_dir, cleanup_mode="stop")
        except Exception as e:  # pgserver raises plain exceptions with initdb's output
            raise RetryableError(f"cannot start the embedded PostgreSQL in {data_dir}: {e}") from e
    return str(_servers[data_dir].get_uri())


def configured(settings: Settings, database_url: str | None = None) -> Database:
    """The results database: ``database_url``, else ``SPOTSWEEP_DATABASE_URL``, else the embedded
    one under ``SPOTSWEEP_HOME`` (local mode's). Here rather than in local mode's module, which
    loads the planner, agent and collector: ``ls`` and ``status`` would pay for importing them."""
    if database_url is None and settings.database_url is not None:
        database_url = settings.database_url.get_secret_value()
    if database_url is None:
        return Database(embedded_url(settings.home / "pg"))
    return Database(database_url, options=pg_options(settings))  # the TLS settings apply to a URL given too


def for_reading(settings: Settings, ready: bool = True) -> Database:
    """The results database for a reading command. A shared one (``SPOTSWEEP_DATABASE_URL``)
    is only checked, never migrated: readers may hold a read-only role, and a schema
    change is the services' to make (:class:`SchemaNotReady` says what to do). Local
    mode's embedded database is this user's alone, so it is brought up to date: `ls`
    before the first `run` shows no sweeps rather than an error. ``ready=False``
    skips the check, for a caller that handles :class:`SchemaNotReady` itself."""
    db = configured(settings)
    if settings.database_url is None:
        db.migrate()
    elif ready:
        db.check()
    return db
