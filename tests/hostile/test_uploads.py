"""A trial's checkpoint and processes, used against the agent, through the real services.

* a checkpoint of 20,000 small files from a trial that exits 0 at once: refused by
  ``limits.checkpoint_files`` (named in the trial's warnings), the trial completed, not
  failed for ``timeout.total``;
* a hard link to a root-only file (``/etc/shadow``) in a checkpoint: the rest is
  uploaded, the linked file is not;
* a ``setsid`` child: killed once its trial is over.

Each time a clean sweep submitted right after completes on the same agent.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hostile import Hostile

from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.settings import Settings

pytestmark = pytest.mark.integration


def spec(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["python", "-c", script.replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "loss", "mode": "min"}, "space": {"x": [0]}, "resources": {"gpus": 0, "class": "cpu"},
            "retries": {"max_failures": 0}, **extra}


def one_row(hostile: Hostile, body: dict[str, Any], state: str = "completed") -> dict[str, Any]:
    sweep_id = hostile.submit(body)
    assert hostile.wait_sweep(sweep_id, timeout=90) == state, (hostile.trials(sweep_id), hostile.cluster.logs())
    [row] = hostile.trials(sweep_id)
    return row


def store_of(hostile: Hostile) -> S3ArtifactStore:
    env = hostile.cluster.env
    return S3ArtifactStore.from_settings(Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v
                                                     for k, v in env.items() if k.startswith("SPOTSWEEP_S3_")}))


MANY_FILES = """
import os
from spotsweep import trial
d = os.environ["SPOTSWEEP_CHECKPOINT_DIR"]
for i in range(20000):
    with open(os.path.join(d, "f%05d" % i), "w") as f:
        f.write("x")
trial.report(1, loss=0.5)
trial.checkpoint_saved(1)
"""


def test_a_checkpoint_of_20000_small_files_is_refused_and_the_trial_completes(hostile: Hostile) -> None:
    row = one_row(hostile, spec("manyfiles", MANY_FILES, timeout={"total": 60}))
    assert row["state"] == "completed" and row["metrics"]["loss"] == 0.5, row
    assert "checkpoint_refused" in row["flags"], row
    assert any("limits.checkpoint_files = 10000" in w for w in row["warnings"]), row["warnings"]
    assert not store_of(hostile).list(f"sweeps/{row['sweep_id']}/trials/")  # nothing half-uploaded
    hostile.assert_clean_sweep_completes()


LINKS_A_SECRET = """
import os
from spotsweep import trial
d = os.environ["SPOTSWEEP_CHECKPOINT_DIR"]
open(os.path.join(d, "model.pt"), "w").write("weights")
os.link(os.environ["SECRET"], os.path.join(d, "shadow"))
trial.report(1, loss=0.5)
trial.checkpoint_saved(1)
"""


def test_a_hard_link_to_a_file_the_trial_does_not_own_is_not_uploaded(hostile: Hostile) -> None:
    # the agent runs as root here and the trial with it: a root-owned secret, linked by the trial
    secret = hostile.tmp / "secret"
    secret.write_text("root:$6$not-for-the-bucket")
    secret.chmod(0o600)
    row = one_row(hostile, spec("hardlink", LINKS_A_SECRET, env={"SECRET": str(secret)}))
    keys = store_of(hostile).list(f"sweeps/{row['sweep_id']}/trials/")
    assert any(k.endswith("/files/model.pt") for k in keys), keys  # the rest of the checkpoint went up
    assert not any(k.endswith("/shadow") for k in keys), keys
    assert "shadow (a hard link (" in (hostile.tmp / "agent.log").read_text()  # said which file and why
    hostile.assert_clean_sweep_completes()


LEAVES_A_SETSID_CHILD = """
import os, subprocess
child = subprocess.Popen(["setsid", "sleep", "300"])
open(os.environ["PIDFILE"], "w").write(str(child.pid))
"""


def test_a_setsid_child_dies_with_its_trial(hostile: Hostile) -> None:
    pidfile = hostile.tmp / "setsid.pid"
    row = one_row(hostile, spec("setsid", LEAVES_A_SETSID_CHILD, env={"PIDFILE": str(pidfile)}))
    assert row["state"] == "completed"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 15
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert not running(pid), f"the trial's setsid child {pid} outlived it\n{hostile.cluster.logs()}"
    finally:
        if running(pid):
            os.kill(pid, 9)
    hostile.assert_clean_sweep_completes()


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
