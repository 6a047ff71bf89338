"""Issue 21 item 4 through the real services: trials whose checkpoint files
are renamed into place and deleted while the agent snapshots and uploads
them (a folder per step through a temp name, the last two kept) all complete;
none is charged with the agent's upload (no "agent error: FileNotFoundError")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

CHURN = """
import os, shutil
from spotsweep import trial
d = trial.checkpoint_dir
for step in range(1, 41):
    tmp = d / f".ckpt-{step}.tmp"
    tmp.mkdir()
    for part in range(16):
        (tmp / f"part-{part}").write_bytes(os.urandom(1024))
    os.replace(tmp, d / f"ckpt-{step}")
    shutil.rmtree(d / f"ckpt-{step - 2}", ignore_errors=True)
    trial.checkpoint_saved(step)
    trial.report(step, loss=1.0 / step + trial.params["x"])
"""


def body(name: str) -> dict[str, Any]:
    return {"name": name, "command": ["python", "-c", CHURN.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "loss", "mode": "min"}, "resources": {"gpus": 0, "class": "cpu"},
            "space": {"x": list(range(36))}, "max_concurrent": 8, "retries": {"max_failures": 0},
            "trial_name": name + "_{index}"}


def test_36_trials_churning_their_checkpoints_all_complete(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    for k in (1, 2):
        cluster.start(f"agent{k}", "agent", "--slots", "4", "--class", "cpu", "--workdir", str(tmp_path / f"work{k}"))
    sweep_id = cluster.submit(body("churn"))
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    state = wait_for(db, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running",
                     timeout=240)
    ended = wait_for(db, "SELECT json_object_agg(state, n) FROM (SELECT state, count(*) AS n FROM trials "
                     "WHERE sweep_id = %s GROUP BY state) s", (sweep_id,), lambda v: True)
    assert state == "completed" and ended == {"completed": 36}, (ended, cluster.logs())
    # No failed attempt either (retries are off: one would have failed the trial), and no agent error noted.
    charged = wait_for(db, "SELECT count(*) FROM trials WHERE sweep_id = %s AND (failures > 0 OR error LIKE "
                       "'%%FileNotFoundError%%')", (sweep_id,), lambda v: True)
    assert charged == 0, cluster.logs()
