"""``workdir:`` on one machine: checked when the spec is read, and ``spotsweep run`` runs trials in it, in place.

The cluster's side (packed, uploaded, unpacked by agents) is tests/integration/test_workdir.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotsweep.commands.submit import load, warnings
from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec import load_spec, parse_spec

TRAIN = """
import os, pathlib
from spotsweep import trial
pathlib.Path(f"cwd-{trial.params['k']}.txt").write_text(os.getcwd())
trial.report(1, loss=float(pathlib.Path("data/v.txt").read_text()) + trial.params["k"])
"""


def run_cli(*args: str, home: Path, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def spec_file(tmp: Path, workdir: str, command: str = "[python, train.py]") -> Path:
    path = tmp / "specs" / "sweep.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: wd\ncommand: {command}\nmetric: {{name: loss}}\nspace: {{k: [0, 1]}}\n"
                    f"workdir: {workdir}\nresources: {{gpus: 0, class: cpu}}\n")
    return path


def test_workdir_is_relative_to_the_spec_and_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")
    spec = load(spec_file(tmp_path, "../code"))
    assert spec.workdir == str(tmp_path / "code")
    assert spec.command == ["python", "train.py"]  # left relative: it resolves in the workdir
    assert warnings(spec) == []
    assert warnings(load(spec_file(tmp_path, "../code", "[python, tain.py]"))) == [
        f"command[1]: 'tain.py' is not a file in workdir {tmp_path / 'code'}, where trials run"]

    for workdir, message in (("../nope", "workdir: no such folder (got '../nope', looked for "),
                             ("../code/train.py", "workdir: must be a folder, the trial's code (got '../code/train.py'")):
        proc = run_cli("validate", str(spec_file(tmp_path, workdir)), home=tmp_path / "home", cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_workdir_sha256_must_look_like_one() -> None:
    base = "name: x\ncommand: [python, t.py]\nmetric: {name: loss}\n"
    assert load_spec(base + f"workdir_sha256: {'ab' * 32}\n").workdir_sha256 == "ab" * 32
    with pytest.raises(SpecError, match="workdir_sha256: must be 64 lowercase hex digits"):
        load_spec(base + "workdir_sha256: ../../etc\n")
    # A spec in a message names a folder on the submitting machine: not looked for here.
    assert parse_spec({"name": "x", "command": ["t"], "metric": {"name": "l"}, "workdir": "/no/such"}).workdir == "/no/such"


def test_local_mode_runs_trials_in_the_workdir_in_place(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    (code / "train.py").write_text(TRAIN)
    (code / "data" / "v.txt").write_text("0.5")
    (code / ".gitignore").write_text("data/\n")  # ignored by packing only: local mode does not pack
    home = tmp_path / "home"
    proc = run_cli("run", str(spec_file(tmp_path, "../code")), "--workers", "2", home=home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {(code / f"cwd-{k}.txt").read_text() for k in (0, 1)} == {str(code)}
    assert "wd_0000" in proc.stdout and "0.5" in proc.stdout
    assert not (home / "artifacts" / "code").exists()  # nothing packed or uploaded
