"""Schema migrations (yoyo): old databases upgrade in place, concurrent and
killed migrators are safe, readers never migrate, a newer schema is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from spotsweep.shared.db import Database
from spotsweep.shared.db.migrator import SchemaNotReady, migrations, status
from spotsweep.shared.errors import PermanentError

pytestmark = pytest.mark.integration


def _ids() -> list[str]:
    return [m.id for m in migrations()]


def test_a_version_2_database_gains_flags_and_warnings(database_url: str) -> None:
    """A database made by the hand-rolled schema v2 (before yoyo) migrates, rows intact."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute((Path(__file__).parent / "schema_v2.sql").read_text())
        conn.execute("CREATE TABLE spotsweep_schema (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("INSERT INTO spotsweep_schema (version) VALUES (2)")
        conn.execute("INSERT INTO sweeps (sweep_id, name, state) VALUES ('old-0000aaaa', 'old', 'completed')")
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state)"
                     " VALUES ('old-0000aaaa.0', 'old-0000aaaa', 0, 'old_0', '{}', 'completed')")
    db = Database(database_url)
    try:
        with pytest.raises(SchemaNotReady, match="lacks|no spotsweep schema"):
            db.check()  # a reader says what to do instead of reading an old schema
        assert db.migrate() == _ids()
        assert db.migrate() == []  # idempotent
        db.check()
        with db.transaction() as conn:
            row = conn.execute("SELECT * FROM trial_results").fetchone()
            conn.execute("SELECT count(*) FROM early_cancels")
        assert row is not None and row["trial_name"] == "old_0" and (row["flags"], row["warnings"]) == ([], [])
        assert list(row)[:3] == ["sweep_id", "sweep_name", "trial_id"]  # views append: a reader's columns do not move
    finally:
        db.close()


def test_readers_never_migrate(database_url: str) -> None:
    with pytest.raises(SchemaNotReady, match="no spotsweep schema yet.*spotsweep migrate"):
        Database(database_url).check()
    applied, pending, unknown = status(database_url)
    assert (applied, pending, unknown) == ([], _ids(), [])  # check() created nothing


def test_migration_is_safe_to_run_concurrently(database_url: str) -> None:
    import threading

    errors: list[BaseException] = []
    done: list[list[str]] = []

    def migrate() -> None:
        try:
            done.append(Database(database_url).migrate())
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(done, key=len) == [[]] * 5 + [_ids()]  # exactly one of them applied each migration
    Database(database_url).check()
    with psycopg.connect(database_url) as conn:  # and recorded each once
        assert conn.execute("SELECT count(*) FROM _yoyo_migration").fetchone() == (len(_ids()),)


def test_a_migrator_killed_mid_way_leaves_nothing_that_blocks_the_next(database_url: str) -> None:
    """kill -9 while holding the lock: the advisory lock dies with the process,
    and a yoyo lock row it left behind is broken by the next migrator."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, psycopg\n"
        "c = psycopg.connect(sys.argv[1], autocommit=True)\n"
        "c.execute('SELECT pg_advisory_lock(%s)', (0x59075EE9,))\n"
        "c.execute('CREATE TABLE IF NOT EXISTS yoyo_lock (locked int DEFAULT 1, ctime timestamp, pid int NOT NULL, PRIMARY KEY (locked))')\n"
        "c.execute('INSERT INTO yoyo_lock (locked, ctime, pid) VALUES (1, now(), 4242)')\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"), database_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert Database(database_url).migrate() == _ids()
    Database(database_url).check()


def test_a_database_migrated_by_a_newer_spotsweep_is_refused(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc)"
                     " VALUES ('f00', '9999.from-the-future', now())")
    with pytest.raises(PermanentError, match="9999.from-the-future.*newer"):
        db.migrate()
    with pytest.raises(PermanentError, match="newer"):
        db.check()
