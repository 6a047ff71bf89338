"""Experiment trackers follow a trial across attempts (issue 30): every attempt
sees the same ``WANDB_RUN_ID`` (with ``WANDB_RESUME=allow``), unless the spec's
``env`` names its own; run through the real runner, and through W&B itself
(offline) where the package is installed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spotsweep.services.agent.trial_env import WANDB_ID_CHARS, tracker_ids, trial_environment, wandb_run_id
from spotsweep.shared.artifacts.checkpoints import log_key

from tests.services.agent.conftest import Kit

W_AND_B = re.compile(r"[A-Za-z0-9_-]+")


def test_the_wandb_id_is_the_trial_id_in_wandb_characters() -> None:
    assert wandb_run_id("mnist-1a2b3c4d", "mnist-1a2b3c4d.17") == "mnist-1a2b3c4d-17"
    assert wandb_run_id("lr sweep/é", "lr sweep/é.3") == "lr-sweep-3"
    assert wandb_run_id("sw", "7") == "sw-7"  # a trial id without its sweep's gets it in front
    assert tracker_ids("sw", "sw.0") == {"WANDB_RUN_ID": "sw-0", "WANDB_RESUME": "allow"}


def test_a_long_id_is_cut_and_two_long_ids_stay_apart() -> None:
    sweep = "a-very-long-sweep-name-" * 4 + "0123abcd"
    one, two = wandb_run_id(sweep, f"{sweep}.1"), wandb_run_id(sweep, f"{sweep}.2")
    assert one != two and len(one) <= WANDB_ID_CHARS and len(two) <= WANDB_ID_CHARS
    assert W_AND_B.fullmatch(one) and W_AND_B.fullmatch(two)
    assert one == wandb_run_id(sweep, f"{sweep}.1")  # stable: a pure function of the ids


def test_the_spec_env_wins_over_the_tracker_ids_and_the_agents_never_does() -> None:
    agent = {b"PATH": b"/usr/bin", b"WANDB_RUN_ID": b"agent-wide"}
    ours = {"SPOTSWEEP_TRIAL_ID": "sw.0"}
    env = trial_environment(agent, {}, ours, extra=("WANDB_*",), defaults=tracker_ids("sw", "sw.0"))
    assert env[b"WANDB_RUN_ID"] == b"sw-0" and env[b"WANDB_RESUME"] == b"allow"
    env = trial_environment(agent, {"WANDB_RUN_ID": "mine", "WANDB_RESUME": "never"}, ours,
                            defaults=tracker_ids("sw", "sw.0"))
    assert env[b"WANDB_RUN_ID"] == b"mine" and env[b"WANDB_RESUME"] == b"never"


SHOW = """
import json, os
print(json.dumps({k: os.environ.get(k) for k in ("SPOTSWEEP_TRIAL_ID", "SPOTSWEEP_ATTEMPT", "WANDB_RUN_ID", "WANDB_RESUME")}))
"""


def _stdout(kit: Kit, attempt: int) -> str:
    return kit.store.get_bytes(log_key("sw", "sw.0", attempt, "stdout")).decode()


def test_every_attempt_of_a_trial_sees_the_same_tracker_ids(kit: Kit) -> None:
    seen = []
    for attempt in (1, 2):
        final, _ = kit.run(kit.message(SHOW, attempt=attempt))
        assert final.outcome == "completed"
        seen.append(json.loads(_stdout(kit, attempt)))
    assert [s["SPOTSWEEP_ATTEMPT"] for s in seen] == ["1", "2"]
    assert seen[0]["SPOTSWEEP_TRIAL_ID"] == seen[1]["SPOTSWEEP_TRIAL_ID"] == "sw.0"
    assert seen[0]["WANDB_RUN_ID"] == seen[1]["WANDB_RUN_ID"] == "sw-0"
    assert seen[0]["WANDB_RESUME"] == seen[1]["WANDB_RESUME"] == "allow"


WANDB_TRIAL = """
import json, os, wandb
run = wandb.init(project="spotsweep-test", mode="offline")
run.log({"loss": 1.0 / int(os.environ["SPOTSWEEP_ATTEMPT"])})
print(json.dumps({"id": run.id}))
run.finish()
"""


def test_wandb_offline_keeps_one_run_across_attempts(kit: Kit, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    env = {"WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    for attempt in (1, 2):
        final, _ = kit.run(kit.message(WANDB_TRIAL, attempt=attempt, env=env))
        assert final.outcome == "completed", final.error
        assert json.loads(_stdout(kit, attempt).strip().splitlines()[-1]) == {"id": "sw-0"}
    runs = sorted(p.name for p in (wandb_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.endswith("-sw-0") for r in runs)  # two syncable pieces of one run


# The pattern docs/trial-contract.md gives for MLflow, whose server makes run ids.
MLFLOW_TRIAL = """
import os, mlflow
trial = os.environ["SPOTSWEEP_TRIAL_ID"]
found = mlflow.search_runs(filter_string=f"tags.spotsweep_trial_id = '{trial}'", output_format="list", max_results=1)
with mlflow.start_run(run_id=found[0].info.run_id if found else None, run_name=trial,
                      tags={"spotsweep_trial_id": trial}) as run:
    mlflow.log_metric("loss", 1.0, step=int(os.environ["SPOTSWEEP_ATTEMPT"]))
    print(run.info.run_id)
"""


def test_mlflow_file_store_finds_the_trials_run_on_every_attempt(kit: Kit, tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    env = {"MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true"}
    ids = []
    for attempt in (1, 2):
        final, _ = kit.run(kit.message(MLFLOW_TRIAL, attempt=attempt, env=env))
        assert final.outcome == "completed", final.error
        ids.append(_stdout(kit, attempt).strip().splitlines()[-1])
    assert ids[0] == ids[1] and re.fullmatch(r"[0-9a-f]{32}", ids[0])
