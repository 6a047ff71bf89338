"""setup.pip reads no file outside the workdir and echoes none (issue 39, item 3).

A requirements file that includes a root-only file with a tab (``-r<TAB>/root/x``), names a ``file:`` index or
a constraints file under /etc used to reach uv, which ran as root and printed the file into the trial's error.
Now each is refused before uv runs, naming the line and the reason; the file's content appears nowhere a
submitter looks (``status``, the trial's error, its events), and a clean sweep runs on the same agent next.
The agent runs as root without ``--trial-user`` here, the case where uv, had it been reached, could read
anything (this machine's Python lives under /root, which a trial user cannot run); that the build runs as the
trial user where there is one is tests/services/agent/test_pyenv_requirements.py's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from hostile import Hostile

from tests.services.agent.test_pyenv import PKG, tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes root-only files under /root and /etc")


@pytest.fixture()
def secrets() -> Iterator[tuple[str, list[Path]]]:
    """Root-only files outside any workdir, holding a token no output may show."""
    token = f"secret-{uuid.uuid4().hex}"
    paths = [Path(f"/root/spotsweep-h39-{token[-8:]}"), Path(f"/etc/spotsweep-h39-{token[-8:]}")]
    for path in paths:
        path.write_text(f"{token}\n")
        path.chmod(0o600)
    yield token, paths
    for path in paths:
        path.unlink(missing_ok=True)


@pytest.fixture()
def pip_agent(cluster: Cluster, database_url: str, rabbit_url: str, tmp_path: Path) -> Iterator[Hostile]:
    """The hostile services, uv told to ask no index for anything."""
    cluster.env["UV_OFFLINE"] = "1"
    h = Hostile(cluster, database_url, rabbit_url, tmp_path)
    h.start()
    yield h


def sweep(code: Path, name: str, requirements: str) -> dict[str, Any]:
    (code / f"{name}.txt").write_text(requirements)
    return {"name": name, "command": ["python", "train.py"], "metric": {"name": "loss", "mode": "min"},
            "workdir": str(code), "setup": {"pip": f"{name}.txt"}, "space": {"x": [1]},
            "resources": {"gpus": 0, "class": "cpu"}, "retries": {"max_failures": 0}}


def test_requirements_naming_files_outside_the_workdir_are_refused_and_never_echoed(
        pip_agent: Hostile, secrets: tuple[str, list[Path]], tmp_path: Path) -> None:
    token, (root_file, etc_file) = secrets
    code = tree(tmp_path / "code")
    (code / "train.py").write_text(f"from spotsweep import trial\nimport {PKG}\ntrial.report(1, loss={PKG}.VALUE)\n")
    bad = {"tab": f"numpy\n-r\t{root_file}\n", "index": f"--index-url file://{root_file.parent}/\nnumpy\n",
           "constraint": f"-c {etc_file}\n./wheels/{PKG}-1.0-py3-none-any.whl\n"}
    said = {"tab": "outside the workdir", "index": "must be https://", "constraint": "outside the workdir"}
    sweeps = {name: pip_agent.submit(sweep(code, name, text)) for name, text in bad.items()}
    good = pip_agent.submit(sweep(code, "good", f"./wheels/{PKG}-1.0-py3-none-any.whl\n"))
    for name, sweep_id in sweeps.items():
        assert pip_agent.wait_sweep(sweep_id, timeout=120) == "failed"
        (row,) = pip_agent.trials(sweep_id)
        assert row["state"] == "failed" and said[name] in row["error"] and "line " in row["error"], row
    assert pip_agent.wait_sweep(good, timeout=120) == "completed", pip_agent.cluster.logs()  # from the file as read
    pip_agent.assert_clean_sweep_completes()
    seen = [pip_agent.cli(*args).stdout for args in (("status",), ("status", "--json"), ("report", sweeps["tab"]))]
    seen += [repr(r) for table in ("trial_events", "run_events") for r in pip_agent.sql(f"SELECT * FROM {table}")]
    seen += [repr(r) for r in pip_agent.sql("SELECT * FROM trials")] + [repr(r) for r in pip_agent.sql("SELECT * FROM sweeps")]
    seen.append(pip_agent.cluster.logs(tail=10**7))
    assert not [s for s in seen if token in s]
