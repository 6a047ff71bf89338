"""The public view ``sweep_results`` (docs/results.md): one row per sweep,
over a real PostgreSQL migrated the way every service migrates it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dashseed import Dashboard, fleet_sweep, loss_of, small_sweep
from test_api import get

from spotsweep.shared.db import Database

pytestmark = pytest.mark.integration


@pytest.fixture()
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    database.migrate()
    yield database
    database.close()


def rows(db: Database) -> dict[str, dict[str, object]]:
    with db.transaction() as conn:
        return {r["sweep_id"]: r for r in conn.execute("SELECT * FROM sweep_results").fetchall()}


def test_one_row_per_sweep_with_counts_best_and_cost(db: Database) -> None:
    fleet_sweep(db)
    small_sweep(db)
    fleet, small = rows(db)["fleet-1"], rows(db)["web-test-1"]
    assert {k: fleet[k] for k in ("name", "state", "metric", "mode", "repeats", "gpus", "trials", "running", "completed",
                                   "failed", "pending")} == {
        "name": "fleet-test", "state": "running", "metric": "val_loss", "mode": "min", "repeats": 3, "gpus": 2,
        "trials": 18, "running": 1, "completed": 17, "failed": 0, "pending": 0}
    assert (fleet["best"], fleet["gpu_hours"], fleet["cost"], fleet["on_demand_cost"]) == pytest.approx((1.0, 6.0, 6.0, 18.0))
    assert small["best"] == pytest.approx(loss_of({"lr": 3e-3, "opt": "adam", "layers": 5}))  # the best of small_sweep
    assert (small["failed"], small["cost"], small["on_demand_cost"]) == (1, None, None)  # the NaN trial is no best


def test_a_cpu_sweep_says_gpus_0_and_counts_slot_hours(db: Database) -> None:
    """gpus is the spec's value (it read 1 for ``gpus: 0``); a CPU trial's hours are slot-hours, priced per slot."""
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state) VALUES ('cpu-1', 'cpu', %s::json, 'running')",
                     ('{"metric": {"name": "loss"}, "resources": {"gpus": 0}, "pricing": {"gpu_hour": 0.5}}',))
        conn.execute("INSERT INTO trials (sweep_id, trial_id, idx, trial_name, params, state, run_seconds)"
                     " VALUES ('cpu-1', 'cpu-1.0', 0, 't0', '{}', 'completed', 7200)")
    cpu = rows(db)["cpu-1"]
    assert (cpu["gpus"], cpu["gpu_hours"], cpu["cost"]) == (0, pytest.approx(2.0), pytest.approx(1.0))


def test_no_stored_spec_can_break_the_view(db: Database) -> None:
    small_sweep(db)
    with db.transaction() as conn:
        for i, spec in enumerate(['{"repeats": "x", "resources": {"gpus": 1e300}, "pricing": {"gpu_hour": 1e400},'
                                  ' "metric": [{"name": "m", "mode": "max"}]}', "[1, 2]", '"text"', "null",
                                  '{"metric": {"name": 3}, "resources": {"gpus": -2}, "pricing": {"gpu_hour": "cheap"}}']):
            conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state) VALUES (%s, 'bad', %s::json, 'rejected')",
                         (f"bad-{i}", spec))
    got = rows(db)
    assert len(got) == 6 and (got["bad-0"]["metric"], got["bad-0"]["mode"], got["bad-0"]["repeats"]) == ("m", "max", 1)
    assert all(got[f"bad-{i}"]["gpus"] == 1 and got[f"bad-{i}"]["cost"] is None for i in range(5))


def test_the_dashboards_sweep_list_comes_from_the_view(dashboard: Dashboard) -> None:
    fleet_sweep(dashboard.db)
    [sweep] = get(dashboard, "/api/sweeps")
    assert sweep["counts"] == {"running": 1, "completed": 17} and sweep["best"] == pytest.approx(1.0)
    assert (sweep["gpu_hours"], sweep["cost"], sweep["on_demand_cost"]) == pytest.approx((6.0, 6.0, 18.0))
    assert "6.00 GPU-h · 6.00 (on demand 18.00)" in get(dashboard, "/")
