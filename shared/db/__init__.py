"""PostgreSQL access: connections, errors translated; schema migration in :mod:`.migrator`.

Each thread gets its own connection (psycopg connections are not meant to be
shared across threads mid-transaction); a dropped connection is replaced on
the next ``transaction()``. Library errors become :class:`RetryableError`
(connection problems, serialization failures) or :class:`PermanentError`
(bad data, a program limit) by their SQLSTATE (:mod:`.sqlstate`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import SecretStr

from spotsweep.shared.db.connect_error import connect_error
from spotsweep.shared.db.liveness import with_liveness
from spotsweep.shared.db.sqlstate import translated
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import redact_url
from spotsweep.shared.tls import refusal

Row = dict[str, Any]
Conn = psycopg.Connection[Row]  # every connection here returns rows as dicts


def required_database(database_url: SecretStr | None, who: str, options: Mapping[str, str] | None = None) -> Database:
    """The service's database, or a clear error when none is configured; ``options`` as :class:`Database`'s."""
    if database_url is None:
        raise PermanentError(f"SPOTSWEEP_DATABASE_URL is not set: the {who} needs PostgreSQL")
    return Database(database_url.get_secret_value(), options=options)


class Database:
    def __init__(self, url: str, connect_timeout: int = 10, options: Mapping[str, str] | None = None) -> None:
        """``options``: libpq parameters added to the URL's, which stays as the user gave it
        (the TLS settings: :func:`spotsweep.shared.tls.pg_options`); TCP keepalives and a user
        timeout are added unless either sets them (:mod:`.liveness`)."""
        self.url = url
        self.options: dict[str, Any] = with_liveness(url, dict(options or {}))  # Any: psycopg types its keywords
        self._timeout = connect_timeout
        self._local = threading.local()

    def _conn(self) -> Conn:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            try:
                conn = psycopg.connect(self.url, row_factory=dict_row, connect_timeout=self._timeout,  # type: ignore[arg-type]
                                       **self.options)
            except psycopg.Error as e:  # a URL libpq cannot parse too (ProgrammingError): never a traceback
                if isinstance(e, psycopg.OperationalError) and (
                        refused := refusal(e, "PostgreSQL", redact_url(self.url), "SPOTSWEEP_DATABASE_SSLROOTCERT")) is not None:
                    raise refused from None
                raise connect_error(self.url, e) from None  # not "from e": its message may quote the password
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

    def migrate(self) -> list[str]:
        """Apply pending schema migrations (:mod:`.migrator`); returns their ids.
        Writers only; safe from any number of services at once."""
        from spotsweep.shared.db import migrator  # here: yoyo loads only in processes that migrate

        return migrator.migrate(self.url, self.options)

    def check(self) -> None:
        """Raise :class:`~.migrator.SchemaNotReady` unless the schema is current: readers never migrate."""
        from spotsweep.shared.db import migrator  # here: yoyo, as in migrate()

        migrator.check(self.url, self.options)
