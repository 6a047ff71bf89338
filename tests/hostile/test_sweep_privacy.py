"""Trials read only their own sweep's code and inputs (issue 39, item 6), through the real services.

One agent as root with ``--trial-user`` (one user: two sweeps' trials running as the same uid, one after the
other, the hardest case for file permissions) runs sweep A, whose code and S3 input hold a secret; then sweep
B, given the paths of A's code and input trees on the node (what a trial could guess or find), tries to list
the caches and A's trees and to read A's files. Every try fails, both sweeps read their own code and input, and
both complete. Under ``--runtime docker`` the same holds, the container's own tree reached through
``--group-add``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster

from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from tests.hostile.test_containers_hold import BASE, trial
from tests.integration.test_inputs_s3 import USER, _ensure_user
from tests.support.trial_image import need

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="switches to a trial user")]

# The trial: reads its own code and input, then tries to list the caches (CACHES) and to list or read sweep A's
# trees and files (TREES); reports what it read of its own, how many caches it listed and how many of A's paths it
# got, and whether A's tree names or its secret showed in anything it saw.
PROBE = r"""
import json, os
env = os.environ
own = float(open("code.txt").read() == env["CODE"] and open("data/mine.txt").read() == env["DATA"])
def tries(paths):
    got, seen = 0, ""
    for path in paths:
        try:
            seen += " ".join(os.listdir(path)) if os.path.isdir(path) else open(path).read()
            got += 1
        except OSError:
            pass
    return got, seen
listed, names = tries(json.loads(env.get("CACHES", "[]")))
got, text = tries(json.loads(env.get("TREES", "[]")))
leak = any(word in names + text for word in ["A-secret", *json.loads(env.get("NAMES", "[]"))])
with open(env["SPOTSWEEP_METRICS"], "a") as out:
    out.write(json.dumps({"step": 1, "own": own, "listed": float(listed), "got": float(got), "leak": float(leak)}) + "\n")
"""


@pytest.fixture()
def workdir() -> Iterator[Path]:
    """The agent's workdir where the trial user can reach it (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="spotsweep-privacy-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def code(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / f"code-{name}"
    folder.mkdir()
    (folder / "code.txt").write_text(text)
    (folder / "probe.py").write_text(PROBE)
    return folder


def spec(name: str, folder: Path, bucket: str, python: str, runtime: str, **env: str) -> dict[str, Any]:
    return {"name": name, "command": [python, "probe.py"], "workdir": str(folder), "metric": {"name": "own"},
            "inputs": [{"from": f"s3://{bucket}/{name}/", "to": "data"}], "env": env,
            "resources": {"gpus": 0, "class": "cpu"}, "retries": {"max_failures": 0},
            **({"image": BASE} if runtime == "docker" else {})}


def a_trees(workdir: Path) -> dict[str, str]:
    """The caches, and sweep A's code and input trees on the node with a file of each (found as root), as env."""
    codes = [p for p in (workdir / "code").iterdir() if (p / "code.txt").is_file()]
    inputs = [p for p in (workdir / "inputs").iterdir() if (p / "mine.txt").is_file()]
    assert len(codes) == 1 and len(inputs) == 1, (codes, inputs)
    trees = (codes[0], codes[0] / "code.txt", inputs[0], inputs[0] / "mine.txt",
             workdir / "inputs" / f".{inputs[0].name}.manifest")
    return {"CACHES": json.dumps([str(workdir / "code"), str(workdir / "inputs")]),
            "TREES": json.dumps([str(p) for p in trees]), "NAMES": json.dumps([codes[0].name, inputs[0].name])}


@pytest.mark.parametrize("runtime", ["process", "docker"])
def test_a_trial_cannot_list_or_read_another_sweeps_code_or_inputs(
        cluster: Cluster, s3_env: dict[str, str], workdir: Path, tmp_path: Path, runtime: str) -> None:
    python = "python3" if runtime == "docker" else "/usr/bin/python3"  # the system's: the trial user runs it
    if runtime == "docker":
        need("docker")
    _ensure_user()
    bucket = "datasets-" + uuid.uuid4().hex[:8]
    data = S3ArtifactStore(s3_env["SPOTSWEEP_S3_ENDPOINT"], s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
                           s3_env["SPOTSWEEP_S3_SECRET_KEY"], bucket)
    data.put_bytes("a/mine.txt", b"A-secret data")
    data.put_bytes("b/mine.txt", b"B data")
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--class", "cpu", "--trial-user", USER, "--workdir", str(workdir),
                  *(["--runtime", "docker"] if runtime == "docker" else []))

    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    a = trial(db, cluster, cluster.submit(spec("a", code(tmp_path, "a", "A-secret code"), bucket, python, runtime,
                                               CODE="A-secret code", DATA="A-secret data")))
    assert a["state"] == "completed" and a["metrics"]["own"] == 1.0, (a, cluster.logs())

    paths = a_trees(workdir)
    b = trial(db, cluster, cluster.submit(spec("b", code(tmp_path, "b", "B code"), bucket, python, runtime,
                                               CODE="B code", DATA="B data", **paths)), timeout=120)
    assert b["state"] == "completed", (b, cluster.logs())
    m = b["metrics"]
    assert (m["own"], m["got"], m["leak"]) == (1.0, 0.0, 0.0), (m, paths)
    if runtime == "process":  # neither cache can be listed (a container sees no cache: its own trees' mount points)
        assert m["listed"] == 0.0, m
