"""Resource samples (sys/ metrics), anomaly flags and `spotsweep top`, through the real services:
planner, collector and agent as processes over RabbitMQ, PostgreSQL and moto's S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

# One script, five behaviours. `busy` holds ~100 MiB and spins until the test
# releases it; `stalled` goes silent (past half of timeout.stall, short of all
# of it) until released.
TRIAL = r"""
import math, os, sys, time
from spotsweep import trial
kind, release = trial.params["kind"], sys.argv[1]
def released(most):
    end = time.time() + most
    while time.time() < end and not os.path.exists(release):
        time.sleep(0.05)
if kind == "busy":
    ballast = bytearray(100 * 1024 * 1024)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    step, end = 0, time.time() + 120
    while not os.path.exists(release) and time.time() < end:
        t = time.time() + 0.2
        while time.time() < t:
            pass
        step += 1
        trial.report(step, aux_loss=0.01)  # every step; the objective only every 5th (as evals are)
        if step % 5 == 1:
            trial.report(step, loss=1.0 / step)
elif kind == "nan":
    trial.report(1, loss=0.5)
    trial.report(2, loss=float("nan"))
elif kind == "diverging":
    for step, loss in enumerate([1.0, 0.5, 0.6, 2.0], 1):
        trial.report(step, loss=loss)
elif kind == "stalled":
    trial.report(1, loss=0.5)
    released(9)
    trial.report(2, loss=0.4)
else:
    trial.report(1, loss=0.5)
    trial.report(2, loss=0.25)
"""


def spec(script: Path, release: Path) -> dict[str, Any]:
    return {
        "name": "monitored",
        "command": ["python", str(script), str(release)],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"kind": ["busy", "nan", "diverging", "stalled", "healthy"], "steps": [100000]},
        "max_concurrent": 5,
        "timeout": {"stall": "10s"},
        "retries": {"max_failures": 0},
        "resources": {"gpus": 0, "class": "cpu"},
        "trial_name": "mon_{kind}",
    }


def query(database_url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, args).fetchall()


def test_sys_metrics_flags_and_top_on_a_real_sweep(cluster: Cluster, database_url: str, tmp_path: Path) -> None:
    script, release = tmp_path / "trial.py", tmp_path / "release"
    script.write_text(TRIAL)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--slots", "5")
    sweep_id = cluster.submit(spec(script, release))
    try:
        # The busy trial's samples arrive while it runs: ~100 MiB resident, a busy CPU.
        rss = ("SELECT max(p.value) FROM metric_points p JOIN trial_results t USING (trial_id)"
               " WHERE t.sweep_id = %s AND t.trial_name = 'mon_busy' AND p.name = 'sys/rss_mb'")
        assert (wait_for(database_url, rss, (sweep_id,), lambda v: v >= 80) or 0) >= 80, cluster.logs()
        # A flag shows while its trial still runs.
        live = "SELECT state || ':' || array_to_string(flags, ',') FROM trial_results WHERE trial_name = 'mon_stalled'"
        assert wait_for(database_url, live, (), lambda v: "stalled" in v) == "running:stalled", cluster.logs()

        top = cluster.cli("top", "--json", "--sweep", sweep_id)
        assert top.returncode == 0, top.stderr
        rows = {r["trial_name"]: r for r in json.loads(top.stdout)}
        busy = rows["mon_busy"]
        assert busy["agent"] and busy["rss_mb"] >= 80 and busy["cpu_percent"] > 0 and busy["step"] >= 1
        assert busy["metric"] == "loss" and busy["max_steps"] == 100000  # the objective, not the newest aux_loss
        assert busy["gpu_util"] is None  # no GPU here
        once = cluster.cli("top", "--once", "--sweep", "monitored")  # by name too
        assert once.returncode == 0 and "mon_busy" in once.stdout and "loss=" in once.stdout, once.stderr
        assert cluster.cli("top", "--once", "--sweep", "no-such-sweep").returncode == 2
    finally:
        release.write_text("")
    done = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running")
    assert done == "completed", cluster.logs()

    flags = dict(query(database_url, "SELECT trial_name, flags FROM trial_results WHERE sweep_id = %s", sweep_id))
    assert flags == {"mon_busy": [], "mon_healthy": [], "mon_nan": ["nan"], "mon_diverging": ["diverging"],
                     "mon_stalled": ["stalled"]}, cluster.logs()
    states = dict(query(database_url, "SELECT trial_name, state FROM trial_results WHERE sweep_id = %s", sweep_id))
    assert set(states.values()) == {"completed"}
    # sys/ points are points like any other, but neither final metrics nor the objective.
    metrics = dict(query(database_url, "SELECT trial_name, metrics FROM trial_results WHERE sweep_id = %s", sweep_id))
    assert not any(k.startswith("sys/") for m in metrics.values() for k in m)
    cpu = query(database_url, "SELECT p.value FROM metric_points p JOIN trial_results t USING (trial_id)"
                " WHERE t.trial_name = 'mon_busy' AND p.name = 'sys/cpu_percent' AND t.sweep_id = %s", sweep_id)
    assert cpu and all(0 <= v <= 100 * 64 for (v,) in cpu) and max(v for (v,) in cpu) > 10
    ls = cluster.cli("ls", "--filter", "sweep=" + sweep_id)
    assert "[diverging]" in ls.stdout and "[stalled]" in ls.stdout and "[nan]" in ls.stdout, ls.stdout
