"""The Grafana queries of docs/results.md, read from the doc itself, their
macros and variables expanded as Grafana's PostgreSQL data source expands
them, run against a real PostgreSQL with a sweep's rows."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "web"))
from dashseed import T0, small_sweep  # noqa: E402

from spotsweep.shared.db import Database  # noqa: E402

pytestmark = pytest.mark.integration
DOC = Path(__file__).resolve().parents[3] / "docs" / "results.md"


def grafana_queries() -> list[str]:
    text = DOC.read_text()
    section = text.split("\n## Grafana\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def expand(sql: str, variables: dict[str, str], start: datetime, end: datetime, interval_ms: int) -> str:
    """What Grafana sends: ``$__timeFrom()``/``$__timeTo()`` as quoted RFC 3339 times,
    ``$__interval_ms`` as a number, a single-value variable as its text (quotes doubled)."""
    def iso(t: datetime) -> str:
        return "'" + t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") + "'"

    sql = sql.replace("$__timeFrom()", iso(start)).replace("$__timeTo()", iso(end))
    sql = sql.replace("$__interval_ms", str(interval_ms))
    for name, value in variables.items():
        sql = sql.replace(f"${name}", value.replace("'", "''"))
    assert "$" not in sql, sql
    return sql


@pytest.fixture()
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    database.migrate()
    small_sweep(database)
    yield database
    database.close()


def test_the_doc_has_both_queries() -> None:
    queries = grafana_queries()
    assert len(queries) == 2
    assert "best $metric" in queries[0] and "running" in queries[1]


def test_best_so_far_only_improves_and_ends_at_the_best_finite_value(db: Database) -> None:
    best, _ = grafana_queries()
    sql = expand(best, {"sweep": "web-test-1", "metric": "val_loss"}, T0, T0 + timedelta(hours=1), 1000)
    with db.transaction() as conn:
        rows = conn.execute(sql).fetchall()
        finite = conn.execute("SELECT min((metrics->>'val_loss')::float) AS v FROM trial_results WHERE sweep_id = 'web-test-1'"
                              " AND jsonb_typeof(metrics->'val_loss') = 'number'").fetchone()["v"]
    values = [r["best val_loss"] for r in rows]
    assert len(rows) == 8 and all(math.isfinite(v) for v in values)  # the NaN trial is left out
    assert values == sorted(values, reverse=True) and values[-1] == finite
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)


def test_trials_by_state_over_time(db: Database) -> None:
    _, by_state = grafana_queries()
    sql = expand(by_state, {"sweep": "web-test-1"}, T0, T0 + timedelta(seconds=120), 1000)
    with db.transaction() as conn:
        rows = {r["time"]: r for r in conn.execute(sql).fetchall()}
    assert len(rows) == 121  # one a second
    at = rows[T0 + timedelta(seconds=5)]  # trials 0..5 started (at idx s), none finished yet
    assert (at["running"], at["completed"], at["failed"]) == (6, 0, 0)
    at = rows[T0 + timedelta(seconds=65)]  # trials 0..5 finished at 60..65; 6, 7, nan (8) and the running one (10) run
    assert (at["completed"], at["running"]) == (6, 4)
    end = rows[T0 + timedelta(seconds=120)]
    assert (end["completed"], end["running"]) == (9, 1)  # eight and the NaN one; exp_running goes on


def test_a_quote_in_a_variable_stays_text() -> None:
    best, _ = grafana_queries()
    sql = expand(best, {"sweep": "x' OR '1'='1", "metric": "m"}, T0, T0, 1000)
    assert "sweep_id = 'x'' OR ''1''=''1'" in sql


def test_times_are_utc(db: Database) -> None:
    _, by_state = grafana_queries()
    local = datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))  # = T0
    sql = expand(by_state, {"sweep": "web-test-1"}, local, local + timedelta(seconds=2), 1000)
    with db.transaction() as conn:
        assert [r["time"] for r in conn.execute(sql).fetchall()][0] == T0
