"""``spotsweep submit --wait`` right after a submit: the planner may still be
migrating the schema (one transaction per migration), so a half-made schema is
"not yet", never an error that names a column the last migration adds."""

from __future__ import annotations

import pytest
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import parse_uri

from spotsweep.commands import submit as commands
from spotsweep.shared.db import Database
from spotsweep.shared.db.migrator import migrations
from spotsweep.shared.settings import Settings
from spotsweep.shared.runtime import ExitCode

pytestmark = pytest.mark.integration


def test_wait_on_a_half_migrated_database_waits_for_the_schema(database_url: str) -> None:
    settings = Settings(database_url=database_url)
    backend = PostgresqlPsycopgBackend(parse_uri(database_url.replace("postgresql://", "postgresql+psycopg://", 1)),
                                       "_yoyo_migration")
    backend.init_database()
    ours = migrations()
    for k in range(1, len(ours)):  # each state a planner migrating on start passes through
        with backend.lock():
            backend.apply_migrations(backend.to_apply(ours[:k]))
        assert commands.wait("nosuch-00000000", settings, timeout=0.2, poll=0.1) == ExitCode.TIMEOUT, ours[k - 1].id
    Database(database_url).migrate()
    with Database(database_url).transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, state) VALUES ('done-0000aaaa', 'done', 'completed')")
    assert commands.wait("done-0000aaaa", settings, timeout=5, poll=0.1) == ExitCode.OK


def test_wait_says_why_when_the_schema_stays_behind(database_url: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """No planner, or one older than this build: after a while `--wait` names the missing migration, once."""
    backend = PostgresqlPsycopgBackend(parse_uri(database_url.replace("postgresql://", "postgresql+psycopg://", 1)),
                                       "_yoyo_migration")
    backend.init_database()
    with backend.lock():
        backend.apply_migrations(backend.to_apply(migrations()[:-1]))
    monkeypatch.setattr(commands, "SCHEMA_PATIENCE", 0.0)
    assert commands.wait("nosuch-00000000", Settings(database_url=database_url), timeout=0.5, poll=0.1) == ExitCode.TIMEOUT
    err = capsys.readouterr().err
    assert err.count("still waiting") == 1 and migrations()[-1].id in err, err
