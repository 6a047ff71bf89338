"""Schema migrations with yoyo: the SQL files in ``migrations/``, applied in order.

Why yoyo and not Alembic: the schema is plain SQL (views are the public API,
docs/results.md) and nothing here uses SQLAlchemy; yoyo applies ``.sql``
files over psycopg 3 and records them in ``_yoyo_migration``.

What is ours, and why:

- One migrator at a time, by a session-level PostgreSQL advisory lock on a
  connection of our own: it is released when the process dies, even by
  kill -9, where yoyo's own lock row would stay behind until someone runs
  ``yoyo break-lock``. Holding it, any yoyo lock row left is such a stale one.
- yoyo records a migration after running it (two transactions), so a
  migrator killed in between runs it again: every migration file must be
  idempotent (``IF NOT EXISTS``, ``CREATE OR REPLACE``).
- Writers (planner, collector, local mode, ``spotsweep migrate``) migrate;
  readers (``ls``, ``status``, ``report``, the dashboard, the Python API) only
  :func:`check`, and say what to do when the schema is missing or older.
- A database migrated by a newer spotsweep (migrations this build does not
  know) is refused rather than written with old assumptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import psycopg
from yoyo import read_migrations
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import parse_uri
from yoyo.migrations import MigrationList

from spotsweep.shared.db.connect_error import connect_error
from spotsweep.shared.db.sqlstate import translated
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import redact_url
from spotsweep.shared.tls import refusal

_LOCK = 0x5907_5EE9  # pg_advisory_lock key: one migrator at a time
_TABLE = "_yoyo_migration"


class SchemaNotReady(PermanentError):
    """The database lacks migrations this build needs; a reader cannot go on.
    ``empty``: it has no spotsweep schema at all (nothing ran there yet), which
    listings show as no sweeps; ``submit --wait`` treats it as "not yet"."""

    def __init__(self, message: str, empty: bool) -> None:
        super().__init__(message)
        self.empty = empty


def migrations() -> MigrationList:
    """This build's migrations, in the order they apply."""
    with resources.as_file(resources.files("spotsweep.shared.db") / "migrations") as folder:
        return read_migrations(str(folder))


def _backend(url: str, options: Mapping[str, Any]) -> PostgresqlPsycopgBackend:
    class Backend(PostgresqlPsycopgBackend):
        def connect(self, dburi: Any) -> psycopg.Connection[Any]:
            # libpq parses our URL (every form it accepts: sockets, service
            # files, key=value), not yoyo's URI parser.
            return psycopg.connect(url, autocommit=True, **options)

    return Backend(parse_uri("postgresql+psycopg://"), _TABLE)


def _applied(conn: psycopg.Connection[Any]) -> list[str]:
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (_TABLE,)).fetchone()
    if not exists or not exists[0]:
        return []
    return [row[0] for row in conn.execute(f"SELECT migration_id FROM {_TABLE}").fetchall()]


def status(url: str, options: Mapping[str, str] | None = None) -> tuple[list[str], list[str], list[str]]:
    """(applied, pending, unknown) migration ids; unknown ones came from a newer spotsweep."""
    with _connect(url, options) as conn:
        return _status(conn)


def _status(conn: psycopg.Connection[Any]) -> tuple[list[str], list[str], list[str]]:
    ours, applied = [m.id for m in migrations()], _applied(conn)
    return ([m for m in ours if m in applied], [m for m in ours if m not in applied],
            [m for m in applied if m not in ours])


def check(url: str, options: Mapping[str, str] | None = None) -> None:
    """Raise :class:`SchemaNotReady` unless every migration of this build is applied.
    ``options``: libpq parameters added to the URL's (:class:`~spotsweep.shared.db.Database`'s)."""
    with _connect(url, options) as conn:
        applied, pending, unknown = _status(conn)
        # Before yoyo, versions 1 to 3 left tables and no record: those need migrating, not "nothing ran here".
        row = conn.execute("SELECT to_regclass('sweeps') IS NULL").fetchone()
        empty = not applied and bool(row and row[0])
    if unknown:
        raise _newer(url, unknown)
    if pending:
        what = "has no spotsweep schema yet" if empty else f"lacks migration(s) {', '.join(pending)}"
        raise SchemaNotReady(f"the results database at {redact_url(url)} {what}: start the planner or the collector "
                             "(they migrate on start) or run `spotsweep migrate`", empty=empty)


def migrate(url: str, options: Mapping[str, str] | None = None) -> list[str]:
    """Apply pending migrations; returns the ids applied. Safe from any number of processes at once."""
    with _connect(url, options) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
        try:
            backend = _backend(url, options or {})
            with backend:
                backend.init_database()
                backend.break_lock()  # we hold the advisory lock: any yoyo lock row is stale
                unknown = [m for m in _applied(lock) if m not in {m.id for m in migrations()}]
                if unknown:
                    raise _newer(url, unknown)
                todo = backend.to_apply(migrations())
                backend.apply_migrations(todo)
                return [m.id for m in todo]
        except psycopg.Error as e:
            raise translated(e) from e
        finally:
            if not lock.closed and not lock.broken:
                lock.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))


def _newer(url: str, unknown: list[str]) -> PermanentError:
    return PermanentError(f"the results database at {redact_url(url)} has migration(s) {', '.join(unknown)} "
                          "that this spotsweep does not know: it was migrated by a newer version; upgrade spotsweep")


def _connect(url: str, options: Mapping[str, Any] | None = None) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10, **(options or {}))
    except psycopg.Error as e:  # a URL libpq cannot parse too (ProgrammingError): never a traceback
        if isinstance(e, psycopg.OperationalError) and (
                refused := refusal(e, "PostgreSQL", redact_url(url), "SPOTSWEEP_DATABASE_SSLROOTCERT")) is not None:
            raise refused from None
        raise connect_error(url, e) from None  # not "from e": its message may quote the password
