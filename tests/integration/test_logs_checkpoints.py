"""``spotsweep logs``, ``spotsweep checkpoint``, ``Sweep.checkpoint`` and checkpoint
retention on a real cluster: planner, collector and agent as separate processes
over RabbitMQ, PostgreSQL and moto's S3."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spotsweep
from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.artifacts.browse import NoCheckpoint, list_checkpoints
from spotsweep.shared.artifacts.checkpoint_layout import checkpoint_prefix
from spotsweep.shared.settings import Settings
from tests.support.cluster import Cluster, wait_for
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# Checkpoints steps 1-3 (one more file each: an agent still uploading one
# checkpoint uploads what the folder holds when it reads the next line, so
# a step's folder has at least its own files), printing as it goes; then
# waits for the test's go file, so that the test sees its logs while it runs.
WAITING = """
import os, pathlib, sys, time
from spotsweep import trial
for step in (1, 2, 3):
    (trial.checkpoint_dir / f"state-{step}.txt").write_text(str(step))
    trial.checkpoint_saved(step)
    trial.report(step, loss=1.0 / step)
    print(f"step {step}", flush=True)
print("a warning", file=sys.stderr, flush=True)
go = pathlib.Path(os.environ["GO_FILE"])
while not go.exists():
    time.sleep(0.05)
print("done", flush=True)
"""

# loss = base + curve[step]: x=0 and x=2 complete (best at step 2, last step 4),
# x=1 is far worse and median stopping prunes it at its first step.
CURVE = """
import time
from spotsweep import trial
base = {0: 0.0, 1: 100.0, 2: -0.1}[trial.params["x"]]
for step, value in ((1, 3.0), (2, 1.0), (3, 2.0), (4, 2.5)):
    trial.report(step, loss=base + value)  # before the checkpoint: its MANIFEST keeps this value
    (trial.checkpoint_dir / "w.txt").write_text(str(step))
    trial.checkpoint_saved(step)
    time.sleep(1.0 if base > 50 else 0.2)
"""


def body(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["python", "-c", script.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "loss", "mode": "min"}, "resources": {"gpus": 0, "class": "cpu"},
            "trial_name": name + "_{index}", **extra}


def start(cluster: Cluster, tmp: Path, slots: int = 1) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", str(slots), "--class", "cpu", "--workdir", str(tmp / "work"),
                  env={"SPOTSWEEP_LOG_UPLOAD_SECONDS": "0.3", "GO_FILE": str(tmp / "go"),
                       "SPOTSWEEP_TRIAL_ENV_PASS": "GO_FILE"})  # trials get only what the allow-list passes


def test_logs_while_running_follow_and_after_the_node_is_gone(cluster: Cluster, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    start(cluster, tmp_path)
    sweep_id = cluster.submit(body("arts", WAITING, space={"x": [1]}, checkpoints={"keep": "all"}))
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    assert wait_for(db, "SELECT state FROM trial_results WHERE sweep_id = %s", (sweep_id,),
                    lambda s: s == "running") == "running", cluster.logs()

    # While it runs: the agent uploaded what it printed so far.
    def running_log() -> str:
        return cluster.cli("logs", "arts_0", "--sweep", "arts").stdout
    assert wait_until(lambda: "step 3" in running_log(), timeout=60), cluster.logs()
    assert "==> stdout (attempt 1) <==" in running_log() and "done" not in running_log()

    follow = subprocess.Popen([sys.executable, "-m", "spotsweep", "logs", "arts_0", "--sweep", sweep_id, "--follow"],
                              env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (tmp_path / "go").touch()
    out, err = follow.communicate(timeout=90)  # ends by itself when the trial ends
    assert follow.returncode == 0, err
    assert out.count("step 1") == 1 and "done" in out and "a warning" in out

    assert wait_for(db, "SELECT state FROM trial_results WHERE sweep_id = %s", (sweep_id,),
                    lambda s: s == "completed") == "completed", cluster.logs()
    cluster.kill9("agent")  # the node is gone; the logs are not
    done = cluster.cli("logs", "arts_0", "--sweep", "arts")
    assert done.returncode == 0 and "step 1\nstep 2\nstep 3\ndone\n" in done.stdout
    assert "==> stderr (attempt 1) <==\na warning" in done.stdout

    trial_id = wait_for(db, "SELECT trial_id FROM trial_results WHERE sweep_id = %s", (sweep_id,), lambda t: True)
    by_id = cluster.cli("logs", trial_id, "--attempt", "1")
    assert by_id.returncode == 0 and "done" in by_id.stdout
    bad = cluster.cli("logs", trial_id, "--attempt", "2")
    assert bad.returncode == 2 and "no log of attempt 2" in bad.stderr and "attempts with logs: 1" in bad.stderr
    unknown = cluster.cli("logs", "arts_9", "--sweep", "arts")
    assert unknown.returncode == 2 and "no trial has the id or name 'arts_9' in sweep arts" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    no_sweep = cluster.cli("checkpoint", "arts_0", "--sweep", "nope", "--out", str(tmp_path / "x"))
    assert no_sweep.returncode == 2 and "--sweep: no sweep has the id or name 'nope'" in no_sweep.stderr

    # Checkpoints: the latest, a given step, a step that is not there.
    latest = cluster.cli("checkpoint", "arts_0", "--sweep", "arts", "--out", str(tmp_path / "latest"))
    assert latest.returncode == 0, latest.stderr
    assert sorted(p.name for p in (tmp_path / "latest").iterdir()) == ["state-1.txt", "state-2.txt", "state-3.txt"]
    one = cluster.cli("checkpoint", trial_id, "--out", str(tmp_path / "one"), "--step", "1")
    assert one.returncode == 0 and (tmp_path / "one" / "state-1.txt").read_text() == "1"
    assert "checkpoint of step 1 of trial arts_0" in one.stdout
    nine = cluster.cli("checkpoint", trial_id, "--out", str(tmp_path / "nine"), "--step", "9")
    assert nine.returncode == 2
    assert re.search(r"no complete checkpoint at step 9; steps there are: 1(, 2)?, 3$", nine.stderr.strip()), nine.stderr

    # The Python API shares the code.
    for name, value in cluster.env.items():
        if name.startswith("SPOTSWEEP_"):
            monkeypatch.setenv(name, value)
    with spotsweep.results(db) as r:
        sw = r.sweep("arts")
        assert sw.checkpoint("arts_0", tmp_path / "py") == 3
        assert (tmp_path / "py" / "state-3.txt").read_text() == "3"
        assert sw.checkpoint(trial_id, str(tmp_path / "py1"), step=1) == 1
        with pytest.raises(NoCheckpoint, match="steps there are: 1"):
            sw.checkpoint("arts_0", tmp_path / "py9", step=9)


def test_retention_last_best_all_on_the_bucket(cluster: Cluster, tmp_path: Path) -> None:
    start(cluster, tmp_path, slots=3)
    early = {"type": "median", "startup_trials": 1}
    ids = {keep: cluster.submit(body(f"keep-{keep}", CURVE, space={"x": [0, 1, 2]}, max_concurrent=1,
                                     early_stop=early, checkpoints={"keep": keep}))
           for keep in ("last", "best", "all")}
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    for sweep_id in ids.values():
        assert wait_for(db, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,),
                        lambda s: s != "running", timeout=120) == "completed", cluster.logs()
    store = S3ArtifactStore.from_settings(Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v
                                                      for k, v in cluster.env.items() if k.startswith("SPOTSWEEP_S3_")}))
    expected = {"last": [4], "best": [2, 4], "all": [1, 2, 3, 4]}
    for keep, sweep_id in ids.items():
        rows = {r: wait_for(db, "SELECT trial_id || ' ' || state FROM trial_results WHERE sweep_id = %s AND"
                            " trial_name = %s", (sweep_id, f"keep-{keep}_{r}"), lambda v: True).split()
                for r in (0, 1, 2)}
        assert [rows[i][1] for i in (0, 1, 2)] == ["completed", "pruned", "completed"], (keep, rows)
        for i in (0, 2):
            found = sorted(c.step for c in list_checkpoints(store, sweep_id, rows[i][0]))
            assert found == expected[keep], (keep, i, found)
        pruned = rows[1][0]
        if keep == "all":
            assert list_checkpoints(store, sweep_id, pruned)
        else:  # the agent deletes them once the planner's stop reached it
            gone = checkpoint_prefix(sweep_id, pruned)
            assert wait_until(lambda: not store.list(gone), timeout=30), keep  # noqa: B023 - used at once
