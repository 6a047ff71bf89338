"""Rows written the way the planner and the collector write them, and a small
sweep with every case the dashboard must show (NaN, failure, resume, a hostile name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg.types.json import Json, Jsonb

from spotsweep.shared.db import Database
from spotsweep.shared.db.journal import journal
from spotsweep.shared.messages import TrialFinished, TrialStarted

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
              finished: float | None = None, started: float | None = None, run_seconds: float = 0.0,
              agent: str | None = None) -> str:
    trial_id = f"{sweep_id}.{idx}"
    done = T0 + timedelta(seconds=finished if finished is not None else 60 + idx) if state == "completed" else None
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, attempt, preemptions, metrics, error,"
            " started_at, finished_at, run_seconds, agent) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (trial_id, sweep_id, idx, name, Jsonb(params), state, attempt, preemptions, Jsonb(metrics or {}), error,
             T0 + timedelta(seconds=started if started is not None else idx), done, run_seconds, agent),
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
    stop: Callable[[], None] = lambda: None  # stops the server (a page then polls nothing)


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


FLEET_SPEC: dict[str, Any] = {
    "name": "fleet-test",
    "command": ["python", "train.py", "--lr", "{lr}"],
    "metric": {"name": "val_loss", "mode": "min"},
    "space": {"lr": [0.001, 0.01, 0.1], "opt": ["adam", "sgd"]},
    "strategy": {"type": "grid"},
    "repeats": 3,
    "resources": {"gpus": 2},
    "pricing": {"gpu_hour": 1.0, "on_demand_gpu_hour": 3.0},
}
RUN = 600  # seconds each run of fleet_sweep takes


def base_loss(lr: float, opt: str) -> float:
    return {0.001: 1.5, 0.01: 1.0, 0.1: 2.0}[lr] + (0.5 if opt == "sgd" else 0.0)


def run_events(sweep_id: str, trial_id: str, attempt: int, agent: str, start: float, outcome: str | None,
               run: str) -> list[Any]:
    """A run's start and (unless ``outcome`` is None: still running) its end, as agents send them."""
    began = TrialStarted(sweep_id=sweep_id, trial_id=trial_id, attempt=attempt, agent=agent, run_id=run,
                         time=T0 + timedelta(seconds=start))
    if outcome is None:
        return [began]
    return [began, TrialFinished(sweep_id=sweep_id, trial_id=trial_id, attempt=attempt, agent=agent, run_id=run,
                                 outcome=outcome, duration=RUN, time=T0 + timedelta(seconds=start + RUN))]  # type: ignore[arg-type]


def fleet_sweep(db: Database, sweep_id: str = "fleet-1") -> dict[str, str]:
    """A finished-but-one sweep with ``repeats: 3``, pricing and two agents:
    6 configs x 3 seeds (loss = the config's base + 0.1 x seed), each run 600 s
    on 2 GPUs. node-a (2 slots) runs trials 0-9 two at a time; node-b (1
    slot) the rest, one after another. Trial 0 was preempted on node-a and
    resumed on node-b (at 4,800 s); trial 17 still runs on node-b (since 5,400 s). Trials 0 and 1 carry
    the agent's ``sys/`` samples. Returns names -> trial ids."""
    add_sweep(db, sweep_id, FLEET_SPEC, state="running")
    ids: dict[str, str] = {}
    events: list[Any] = []
    points: list[tuple[str, int, int, str, float]] = []
    configs = [(lr, opt) for lr in (0.001, 0.01, 0.1) for opt in ("adam", "sgd")]
    for i in range(18):
        (lr, opt), seed = configs[i // 3], i % 3
        name = f"fleet_{i:02d}"
        tid = f"{sweep_id}.{i}"
        agent, start = ("node-a", (i // 2) * RUN) if i < 10 else ("node-b", (i - 10) * RUN if i < 17 else 9 * RUN)
        loss = base_loss(lr, opt) + 0.1 * seed
        if i == 0:  # preempted on node-a, resumed on node-b after node-b's other runs
            events += run_events(sweep_id, tid, 1, "node-a", 0, "preempted", "r0a")
            events += run_events(sweep_id, tid, 2, "node-b", 8 * RUN, "completed", "r0b")
            end, runs = 9 * RUN, 2
        elif i == 17:
            events += run_events(sweep_id, tid, 1, agent, start, None, f"r{i}")
            end, runs = None, 0
        else:
            events += run_events(sweep_id, tid, 1, agent, start, "completed", f"r{i}")
            end, runs = start + RUN, 1
        state = "running" if end is None else "completed"
        ids[name] = add_trial(db, sweep_id, i, name, {"lr": lr, "opt": opt, "seed": seed}, state=state,
                              metrics={"val_loss": loss} if end is not None else {}, attempt=max(1, runs),
                              preemptions=1 if i == 0 else 0, finished=end, started=start, run_seconds=RUN * runs,
                              agent=agent)
        for step in range(50):
            points.append((tid, 1, step, "val_loss", loss + 1.0 / (1 + step)))
        if i in (0, 1):
            for sec in range(0, 60, 5):
                points += [(tid, 1, sec, "sys/cpu_percent", 90.0 + i), (tid, 1, sec, "sys/rss_mb", 1000.0 + sec)]
    with db.transaction() as conn:
        journal(conn, events)
    add_points(db, sweep_id, points)
    return ids
