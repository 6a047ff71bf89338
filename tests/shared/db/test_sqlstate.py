"""Database errors are retryable or permanent by their SQLSTATE, not by psycopg's class."""

from __future__ import annotations

import psycopg
import pytest

from spotsweep.shared.db import Database
from spotsweep.shared.db.sqlstate import is_retryable, translated
from spotsweep.shared.errors import PermanentError, RetryableError


@pytest.mark.parametrize("state", [
    "22000", "22P05", "22021", "22003",  # data exceptions: an unsupported Unicode escape, a NUL, out of range
    "23505", "23503",  # integrity
    "54000", "54001",  # program limits: an index row too large, a statement too complex
    "42601", "42501",  # syntax, access
    "XX000", "25P02", "0A000",
])
def test_bad_data_and_limits_are_permanent(state: str) -> None:
    assert not is_retryable(state)
    assert not is_retryable(state, connection_error=True)  # psycopg files class 54 under OperationalError


@pytest.mark.parametrize("state", ["08006", "08001", "40001", "40P01", "53300", "53100", "57P01", "57P03", "57014",
                                   "58030", "55P03", "55006"])
def test_lost_connections_races_and_busy_servers_are_retryable(state: str) -> None:
    assert is_retryable(state)


def test_without_a_sqlstate_only_a_connection_error_is_retryable() -> None:
    assert is_retryable(None, connection_error=True)
    assert not is_retryable(None)
    assert not is_retryable("", connection_error=False)


def test_translated_names_the_state_and_stays_bounded() -> None:
    e = psycopg.errors.ProgramLimitExceeded("index row size 10485776 exceeds btree maximum " + "x" * 100_000)
    error = translated(e)
    assert isinstance(error, PermanentError) and not isinstance(error, RetryableError)
    assert len(str(error)) < 4200


@pytest.mark.integration
def test_a_too_long_index_row_is_permanent_and_the_connection_stays_usable(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    try:
        with pytest.raises(PermanentError, match="54000") as caught, db.transaction() as conn:
            conn.execute("INSERT INTO points (sweep_id, trial_id, attempt, step, name, value) VALUES ('s', 't', 1, 0, %s, 1)",
                         (_random_text(10_000_000),))
        assert isinstance(caught.value.__cause__, psycopg.errors.ProgramLimitExceeded)
        with pytest.raises(PermanentError, match="22"), db.transaction() as conn:  # a NUL: a data exception
            conn.execute("SELECT %s::jsonb", ('{"a\\u0000": 1}',))
        with db.transaction() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        db.close()


def _random_text(n: int) -> str:
    """Text PostgreSQL cannot compress under the index row limit."""
    import base64
    import os

    return base64.b64encode(os.urandom(n * 3 // 4)).decode()[:n]
