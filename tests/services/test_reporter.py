"""Reports: glob filters run in PostgreSQL and mean what they mean in a shell;
repeats are summarised per config (mean, spread, seeds); the sweep's cost."""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
from typing import Any

import psycopg
import pytest
from rich.console import Console

from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.report import glob_to_similar
from spotsweep.services.reporter.summary import by_config, cost_of
from spotsweep.shared.db import Database

NAMES = ["deepseek_exp_001", "deepseek_exp_012", "deepseekXexp_1", "noop_03_x0_y-1", "a%b", "a_b", "run(1)", "x|y",
         "lr0.01", "lr0x01"]


@pytest.mark.parametrize("glob", ["deepseek_exp_*", "deepseek_exp_0?2", "noop_0[34]*", "*[!0-9]", "a%b", "a_b",
                                  "run(1)", "x|y", "lr0.01", "*"])
def test_glob_matches_like_fnmatch(database_url: str, glob: str) -> None:
    with psycopg.connect(database_url) as conn:
        got = {n for n in NAMES if conn.execute("SELECT %s SIMILAR TO %s", (n, glob_to_similar(glob))).fetchone()[0]}
    assert got == {n for n in NAMES if fnmatch.fnmatchcase(n, glob)}


# --- repeats: mean and spread over seeds; cost --------------------------------------------------

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def row(params: dict[str, Any], value: float | None, state: str = "completed", minutes: float = 30) -> dict[str, Any]:
    return {"params": params, "state": state, "metrics": {} if value is None else {"loss": value},
            "started_at": T0, "finished_at": T0 + dt.timedelta(minutes=minutes), "run_seconds": minutes * 60.0}


def test_repeats_are_summarised_per_config() -> None:
    rows = [row({"lr": 0.1, "seed": 0}, 1.0), row({"lr": 0.1, "seed": 1}, 3.0), row({"lr": 0.1, "seed": 2}, None, "failed"),
            row({"lr": 0.01, "seed": 0}, 1.5), row({"lr": 0.01, "seed": 1}, 1.7),
            row({"lr": 1, "seed": 0}, 0.5), row({"lr": True, "seed": 0}, 9.0)]  # 1 and True are two configs
    configs = by_config(rows, "loss", "min")
    assert [c.params for c in configs] == [{"lr": 1}, {"lr": 0.01}, {"lr": 0.1}, {"lr": True}]
    top = configs[1]
    assert (round(top.mean, 9), round(top.std or 0, 6), top.n, top.runs, top.seeds) == (1.6, 0.141421, 2, 2, (0, 1))
    assert (configs[2].mean, configs[2].n, configs[2].runs) == (2.0, 2, 3)
    assert configs[0].std is None
    assert [c.mean for c in by_config(rows, "loss", "max")][:2] == [9.0, 2.0]


def test_cost_from_the_trials_running_time() -> None:
    rows = [row({}, 1.0, minutes=30), row({}, 1.0, minutes=90), {**row({}, None, "pending"), "run_seconds": 0.0}]
    cost = cost_of(rows, gpus=2, pricing={"gpu_hour": 0.9, "on_demand_gpu_hour": 4.1})
    assert (cost.gpu_hours, round(cost.cost or 0, 6), round(cost.on_demand or 0, 6)) == (4.0, 3.6, 16.4)
    assert cost_of(rows, 1, None).cost is None


def test_report_of_a_repeated_sweep_shows_mean_and_spread(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    spec = {"name": "rep", "command": ["t"], "metric": {"name": "loss", "mode": "min"}, "space": {"lr": [0.1, 0.01]},
            "repeats": 2, "resources": {"gpus": 1, "class": "gpu"}, "pricing": {"gpu_hour": 1.0, "on_demand_gpu_hour": 4.0}}
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('rep-1', 'rep', %s, 'completed', 4)",
                     (json.dumps(spec),))
        for i, (lr, seed, loss) in enumerate([(0.1, 0, 1.0), (0.1, 1, 1.4), (0.01, 0, 0.5), (0.01, 1, 0.7)]):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics, started_at, finished_at,"
                         " run_seconds) VALUES (%s, 'rep-1', %s, %s, %s, 'completed', %s, %s, %s, 900)",
                         (f"rep-1.{i}", i, f"rep_{i}", json.dumps({"lr": lr, "seed": seed}), json.dumps({"loss": loss}),
                          T0, T0 + dt.timedelta(minutes=15)))
    rep = reporter.build(db, "rep-1")
    assert [(c.params, round(c.mean, 6), c.n) for c in rep.configs] == [({"lr": 0.01}, 0.6, 2), ({"lr": 0.1}, 1.2, 2)]
    assert rep.cost is not None and rep.cost.gpu_hours == 1.0 and rep.cost.on_demand == 4.0
    console = Console(width=200, record=True)
    reporter.print_leaderboard(rep, out=console)
    text = console.export_text()
    assert "per config over seeds" in text and "0.141421" in text
    assert "cost: 1.00 GPU-h of running trials, 1.00 at the spot price, 4.00 on demand (saved 3.00)" in text
