"""Rows written the way the planner and the collector write them, and a small
sweep with every case the dashboard must show (NaN, failure, resume, a hostile name)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg.types.json import Json, Jsonb

from spotsweep.shared.db import Database

SPEC: dict[str, Any] = {
    "name": "web-test",
    "command": ["python", "train.py", "--lr", "{lr}"],
    "metric": {"name": "val_loss", "mode": "min"},
    "space": {
        "lr": {"type": "loguniform", "low": 1.0e-4, "high": 1.0e-1},
        "opt": ["adam", "sgd"],
        "layers": {"type": "int", "low": 2, "high": 8},
    },
    "strategy": {"type": "random", "trials": 50, "seed": 0},
}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def add_sweep(db: Database, sweep_id: str, spec: dict[str, Any] | None = None, state: str = "running") -> None:
    spec = spec or SPEC
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, created_at) VALUES (%s, %s, %s, %s, %s)",
                     (sweep_id, spec["name"], Json(spec), state, T0))


def add_trial(db: Database, sweep_id: str, idx: int, name: str, params: dict[str, Any], state: str = "completed",
              metrics: dict[str, Any] | None = None, attempt: int = 1, preemptions: int = 0, error: str | None = None,
              finished: float | None = None) -> str:
    trial_id = f"{sweep_id}.{idx}"
    done = T0 + timedelta(seconds=finished if finished is not None else 60 + idx) if state == "completed" else None
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, attempt, preemptions, metrics, error,"
            " started_at, finished_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (trial_id, sweep_id, idx, name, Jsonb(params), state, attempt, preemptions, Jsonb(metrics or {}), error,
             T0 + timedelta(seconds=idx), done),
        )
    return trial_id


def add_points(db: Database, sweep_id: str, rows: list[tuple[str, int, int, str, float]]) -> None:
    """(trial_id, attempt, step, name, value) rows, by COPY as the collector's batches do."""
    with db.transaction() as conn, conn.cursor() as cur:
        with cur.copy("COPY points (sweep_id, trial_id, attempt, step, name, value) FROM STDIN") as copy:
            for trial_id, attempt, step, name, value in rows:
                copy.write_row((sweep_id, trial_id, attempt, step, name, value))


@dataclass
class Dashboard:
    url: str
    db: Database


HOSTILE = "<script>alert(1)</script>"


def loss_of(params: dict[str, Any]) -> float:
    import math

    return 1.0 + abs(math.log10(params["lr"]) + 2.5) + (0.3 if params["opt"] == "sgd" else 0.0) + 0.01 * params["layers"]


def small_sweep(db: Database, sweep_id: str = "web-test-1", steps: int = 200) -> dict[str, str]:
    """A running sweep: eight completed trials (one named like a script tag,
    one resumed after a preemption at step 100), one whose loss turned NaN,
    one failed with an error, one running. Returns names -> trial ids."""
    add_sweep(db, sweep_id)
    ids: dict[str, str] = {}
    lrs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 5e-3]
    points: list[tuple[str, int, int, str, float]] = []
    for i, lr in enumerate(lrs):
        params = {"lr": lr, "opt": "adam" if i % 2 else "sgd", "layers": 2 + i % 7}
        name = HOSTILE if i == 3 else f"exp_{i:03d}"
        final = loss_of(params)
        preempted = i == 5
        ids[name] = add_trial(db, sweep_id, i, name, params, metrics={"val_loss": final, "train_loss": final - 0.1},
                              attempt=2 if preempted else 1, preemptions=1 if preempted else 0)
        for step in range(steps):
            attempt = 2 if preempted and step >= 100 else 1
            points.append((ids[name], attempt, step, "val_loss", final + 2.0 / (1 + step)))
            points.append((ids[name], attempt, step, "train_loss", final - 0.1 + 2.0 / (1 + step)))
    nan = add_trial(db, sweep_id, 8, "exp_nan", {"lr": 0.09, "opt": "sgd", "layers": 8},
                    metrics={"val_loss": "NaN", "train_loss": "Infinity"})
    points += [(nan, 1, s, "val_loss", float("nan") if s >= 50 else 3.0) for s in range(steps)]
    ids["exp_nan"] = nan
    ids["exp_failed"] = add_trial(db, sweep_id, 9, "exp_failed", {"lr": 0.01, "opt": "adam", "layers": 3}, state="failed",
                                  error=f"Traceback (most recent call last):\nRuntimeError: CUDA out of memory {HOSTILE}")
    ids["exp_running"] = add_trial(db, sweep_id, 10, "exp_running", {"lr": 0.002, "opt": "adam", "layers": 4}, state="running")
    points += [(ids["exp_running"], 1, s, "val_loss", 2.0 - s / 100) for s in range(50)]
    add_points(db, sweep_id, points)
    return ids
