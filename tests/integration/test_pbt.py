"""Population-based training through the real services (planner, collector and
agents as processes over RabbitMQ, PostgreSQL and moto's S3), with an agent
preempted and the planner killed -9 in the middle: the sweep still completes,
every exploit's checkpoint was copied before its run, and that run resumed
from the donor's step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from cluster import Cluster, wait_for  # tests/support
from psycopg.rows import dict_row

pytestmark = pytest.mark.integration

# Checkpoints every step (written through a temp file), so a preempted run resumes where it was.
TRIAL = """
import json, os, sys, time
from spotsweep import trial
lr, steps, gate = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
start = trial.resume_step or 0
state = {"w": 10.0}
if start:
    state = json.loads((trial.checkpoint_dir / "state.json").read_text())
for step in range(start + 1, steps + 1):
    time.sleep(0.2)
    state["w"] *= 1 - lr
    trial.report(step, loss=state["w"])
    tmp = trial.checkpoint_dir / "state.tmp"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, trial.checkpoint_dir / "state.json")
    trial.checkpoint_saved(step)
    while os.path.exists(gate):  # the test holds every run here until its agent is preempted
        time.sleep(0.05)
"""
LRS = [0.05, 0.1, 0.2, 0.4]


def spec(gate: Path) -> dict[str, Any]:
    return {"name": "pbt-services", "command": ["python", "-c", TRIAL.replace("{", "{{").replace("}", "}}"), "{lr}",
                                                "{steps}", str(gate)],
            "metric": {"name": "loss"}, "space": {"lr": LRS}, "max_concurrent": 4,
            "strategy": {"type": "pbt", "population": 4, "interval": {"param": "steps", "every": 2, "max": 6},
                         "quantile": 0.5, "mutations": {"lr": {"values": LRS}}, "resample_probability": 0.0},
            "resources": {"gpus": 0, "class": "cpu"}}


def _now(database_url: str) -> Any:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]


def test_pbt_survives_a_preemption_and_a_planner_restart(cluster: Cluster, database_url: str) -> None:
    gate = cluster.tmp / "gate"
    sweep_id = cluster.submit(spec(gate))
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    # One slot per member: an exploit's run never waits behind runs the gate holds.
    agent = cluster.start("agent", "agent", "--slots", "4", "--class", "cpu")
    copied = ("SELECT count(*) FROM pbt_segments WHERE sweep_id = %s AND from_trial_id IS NOT NULL"
              " AND copied_at IS NOT NULL")
    assert wait_for(database_url, copied, (sweep_id,), lambda n: n >= 1) >= 1, cluster.logs()
    # Hold the runs after their next step, so that one is surely mid-run: preempt its agent, then kill the planner.
    gate.touch()
    # An exploit's run has reported from its donor's step before the preemption, so the end can check where it began.
    exploit_ran = copied + (" AND EXISTS (SELECT 1 FROM metric_points p WHERE p.trial_id = pbt_segments.trial_id"
                            " AND p.attempt = pbt_segments.attempt)")
    assert wait_for(database_url, exploit_ran, (sweep_id,), lambda n: n >= 1) >= 1, cluster.logs()
    mid_run = ("SELECT count(*) FROM trials t WHERE t.sweep_id = %s AND t.state = 'running' AND EXISTS"
               " (SELECT 1 FROM metric_points p WHERE p.trial_id = t.trial_id AND p.attempt = t.attempt"
               "  AND p.recorded_at > %s)")
    assert wait_for(database_url, mid_run, (sweep_id, _now(database_url)), lambda n: n >= 1) >= 1, cluster.logs()
    cluster.term("agent")  # the spot node's notice: the agent drains, its trials are stopped and come back
    cluster.kill9("planner")
    assert agent.wait(60) == 0, cluster.logs()
    gate.unlink()
    cluster.start("planner2", "planner")
    cluster.start("agent2", "agent", "--slots", "2", "--class", "cpu")
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running")
    assert state == "completed", cluster.logs()
    codes = cluster.stop()
    assert codes["planner2"] == 0 and codes["agent2"] == 0, (codes, cluster.logs())

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        trials = conn.execute("SELECT trial_id, state, preemptions, params FROM trial_results WHERE sweep_id = %s",
                              (sweep_id,)).fetchall()
        segments = conn.execute("SELECT * FROM trial_segments WHERE sweep_id = %s ORDER BY trial_id, segment",
                                (sweep_id,)).fetchall()
        firsts = conn.execute("SELECT trial_id, attempt, min(step) AS first FROM metric_points WHERE sweep_id = %s"
                              " AND name = 'loss' GROUP BY trial_id, attempt", (sweep_id,)).fetchall()
    assert [t["state"] for t in trials] == ["completed"] * 4, cluster.logs()
    assert sum(t["preemptions"] for t in trials) >= 1, cluster.logs()  # the drained agent's trials came back
    first_step = {(r["trial_id"], r["attempt"]): r["first"] for r in firsts}
    last = {}
    for s in segments:
        last[s["trial_id"]] = s
    assert all(s["end_step"] == 6 for s in last.values()), segments
    assert all(t["params"] == last[t["trial_id"]]["params"] for t in trials)  # the final row: the last segment's params
    exploits = [s for s in segments if s["from_trial_id"] is not None]
    assert exploits and all(s["copied_at"] is not None and s["from_step"] is not None for s in exploits), segments
    for s in exploits:
        # The exploit's run started from the donor's checkpoint (its step + 1), not from the trial's own.
        assert first_step.get((s["trial_id"], s["attempt"])) in (s["from_step"] + 1, None), (s, first_step)
    assert any(first_step.get((s["trial_id"], s["attempt"])) == s["from_step"] + 1 for s in exploits)
