"""shared/db/schema.sql is what the migrations make: regenerate it (``python -m tests.support.schema``) with
every migration that changes a table, an index or a view."""

from __future__ import annotations

import psycopg

from spotsweep.shared.db.migrator import migrate
from tests.support.schema import SCHEMA, render


def test_schema_sql_is_the_migrated_database(database_url: str) -> None:
    migrate(database_url)
    with psycopg.connect(database_url) as conn:
        now = render(conn)
    assert SCHEMA.read_text() == now, "shared/db/schema.sql is stale: run `python -m tests.support.schema`"
