"""``setup: {pip: requirements.txt}`` on a real cluster (issue 30): planner, collector and agent
as separate processes over RabbitMQ, PostgreSQL and moto's S3. `submit` packs a workdir whose
requirements file names a local wheel; the agent builds one virtualenv with uv (offline: nothing
is fetched from an index) and both trials import the package the agent's environment lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_workdir import _consumers, ended, submitted, write_spec
from tests.services.agent.test_pyenv import PKG, tree
from tests.support.cluster import Cluster
from waiting import wait_until  # tests/support

pytestmark = pytest.mark.integration

TRAIN = f"""
import os, sys
from spotsweep import trial
import {PKG}
trial.report(1, loss=float({PKG}.VALUE), in_env=float(sys.prefix == os.environ["VIRTUAL_ENV"]))
"""


def test_trials_import_what_their_requirements_name_from_one_env_built_once(cluster: Cluster, tmp_path: Path) -> None:
    pytest.importorskip("uv")
    cluster.env["UV_OFFLINE"] = "1"
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu", "--workdir", str(tmp_path / "work"))
    code = tree(tmp_path / "code", value=7)
    (code / "train.py").write_text(TRAIN)
    spec = write_spec(tmp_path / "specs" / "pip.yaml", workdir="../code", setup={"pip": "requirements.txt"},
                      space={"k": [1, 2]}, retries={"max_failures": 0})
    assert wait_until(lambda: _consumers(cluster.env["SPOTSWEEP_AMQP_URL"], "spotsweep.trials.cpu") >= 1, 60), \
        cluster.logs()
    sweep_id, _ = submitted(cluster, spec)
    rows = ended(cluster.env["SPOTSWEEP_DATABASE_URL"], sweep_id, 2)
    assert [r["state"] for r in rows] == ["completed"] * 2, rows
    assert [(r["metrics"]["loss"], r["metrics"]["in_env"]) for r in rows] == [(7.0, 1.0)] * 2, rows
    assert len(list((tmp_path / "work" / "pyenvs" / "envs").glob("[!.]*"))) == 1
