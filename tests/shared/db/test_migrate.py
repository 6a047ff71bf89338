"""A version-2 database migrates to the current schema in place, its rows intact."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from spotsweep.shared.db import SCHEMA_VERSION, Database

pytestmark = pytest.mark.integration


def test_a_version_2_database_gains_flags_and_warnings(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute((Path(__file__).parent / "schema_v2.sql").read_text())
        conn.execute("CREATE TABLE spotsweep_schema (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("INSERT INTO spotsweep_schema (version) VALUES (2)")
        conn.execute("INSERT INTO sweeps (sweep_id, name, state) VALUES ('old-0000aaaa', 'old', 'completed')")
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state)"
                     " VALUES ('old-0000aaaa.0', 'old-0000aaaa', 0, 'old_0', '{}', 'completed')")
    db = Database(database_url)
    try:
        db.migrate()
        db.migrate()  # idempotent
        with db.transaction() as conn:
            row = conn.execute("SELECT * FROM trial_results").fetchone()
            version = conn.execute("SELECT max(version) AS v FROM spotsweep_schema").fetchone()["v"]
            conn.execute("SELECT count(*) FROM early_cancels")
        assert version == SCHEMA_VERSION == 3
        assert row is not None and row["trial_name"] == "old_0" and (row["flags"], row["warnings"]) == ([], [])
        assert list(row)[-2:] == ["flags", "warnings"]  # appended: a reader's column positions do not move
    finally:
        db.close()
