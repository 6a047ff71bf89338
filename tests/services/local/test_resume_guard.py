"""`spotsweep resume` with SPOTSWEEP_DATABASE_URL refuses a sweep submitted to the planner:
its trials in flight run on agents, and resuming it here would run them a second time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

from spotsweep.shared.db import Database


def test_resume_refuses_a_sweep_it_did_not_run_and_touches_nothing(database_url: str, tmp_path: Path) -> None:
    Database(database_url).migrate()
    spec = {"name": "remote", "command": ["python", "-c", "pass"], "metric": {"name": "loss"}, "space": {"x": [1]}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials, next_index)"
                     " VALUES ('remote-0000000a', 'remote', %s, 'running', 1, 1)", (json.dumps(spec),))
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, agent)"
                     " VALUES ('remote-0000000a-0', 'remote-0000000a', 0, 'remote_0', '{\"x\": 1}', 'running', 'gpu-node-7')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env |= {"SPOTSWEEP_HOME": str(tmp_path / "home"), "SPOTSWEEP_DATABASE_URL": database_url}
    out = subprocess.run([sys.executable, "-m", "spotsweep", "resume", "remote-0000000a"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "was not started by `spotsweep run` with this SPOTSWEEP_HOME" in out.stderr
    assert "Traceback" not in out.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT state, agent FROM trials").fetchall() == [("running", "gpu-node-7")]
