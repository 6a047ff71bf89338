"""PostgreSQL access: connections, schema migration, errors translated.

Each thread gets its own connection (psycopg connections are not meant to be
shared across threads mid-transaction); a dropped connection is replaced on
the next ``transaction()``. Library errors become :class:`RetryableError`
(connection problems, serialization failures) or :class:`PermanentError`
(bad data, a program limit) by their SQLSTATE (:mod:`.sqlstate`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from importlib import resources

import psycopg
from psycopg.rows import dict_row
from pydantic import SecretStr

from spotsweep.shared.db.sqlstate import translated
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.settings import redact_url

SCHEMA_VERSION = 3  # 3: trials.flags and trials.warnings
Row = dict[str, Any]
Conn = psycopg.Connection[Row]  # every connection here returns rows as dicts
_MIGRATION_LOCK = 0x5907_5EE9  # pg_advisory_lock key: one migrator at a time


def required_database(database_url: SecretStr | None, who: str) -> Database:
    """The service's database, or a clear error when none is configured."""
    if database_url is None:
        raise PermanentError(f"SPOTSWEEP_DATABASE_URL is not set: the {who} needs PostgreSQL")
    return Database(database_url.get_secret_value())


class Database:
    def __init__(self, url: str, connect_timeout: int = 10) -> None:
        self.url = url
        self._timeout = connect_timeout
        self._local = threading.local()

    def _conn(self) -> Conn:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            try:
                conn = psycopg.connect(self.url, row_factory=dict_row, connect_timeout=self._timeout)  # type: ignore[arg-type]
            except psycopg.OperationalError as e:
                raise RetryableError(f"cannot connect to PostgreSQL at {redact_url(self.url)}: {e}") from e
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        """A transaction on this thread's connection; errors translated."""
        conn = self._conn()
        try:
            with conn.transaction():
                yield conn
        except psycopg.Error as e:
            error = translated(e)
            if conn.broken or isinstance(e, psycopg.errors.AdminShutdown):
                conn.close()  # the next transaction() connects afresh
            raise error from e

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    def migrate(self) -> None:
        """Create or upgrade the schema. Safe from any number of services at once."""
        sql = resources.files("spotsweep.shared.db").joinpath("schema.sql").read_text()
        with self.transaction() as conn:
            # Transaction-scoped lock: concurrent starters wait, then find it done.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS spotsweep_schema (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            row = conn.execute("SELECT max(version) AS v FROM spotsweep_schema").fetchone()
            current = row["v"] if row and row["v"] else 0
            if current > SCHEMA_VERSION:
                raise PermanentError(f"database schema v{current} is newer than this spotsweep (v{SCHEMA_VERSION})")
            if current < SCHEMA_VERSION:
                conn.execute(sql)
                conn.execute("INSERT INTO spotsweep_schema (version) VALUES (%s) ON CONFLICT DO NOTHING", (SCHEMA_VERSION,))
