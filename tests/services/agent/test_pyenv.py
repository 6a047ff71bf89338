"""``setup: {pip: FILE}`` (issue 30): what names a trial's virtualenv, and the env built with uv,
through the real runner: a trial imports a package the agent's environment lacks, from a local
wheel its requirements file names (no index is reached), and the next trials use the same env."""

from __future__ import annotations

import fcntl
import os
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent import pyenv
from spotsweep.services.agent.runner import RunnerConfig
from spotsweep.shared.artifacts.checkpoints import log_key
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import Refused

from tests.services.agent.conftest import Kit

PKG = "spotsweep_tiny_pkg"


def wheel(folder: Path, value: int = 42) -> Path:
    """A pure-Python wheel of one module (``spotsweep_tiny_pkg.VALUE``), made without any build tool."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PKG}-1.0-py3-none-any.whl"
    info = f"{PKG}-1.0.dist-info"
    files = {f"{PKG}/__init__.py": f"VALUE = {value}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def tree(root: Path, requirements: str = f"./wheels/{PKG}-1.0-py3-none-any.whl\n", name: str = "requirements.txt",
         value: int = 42) -> Path:
    wheel(root / "wheels", value)
    (root / name).write_text(requirements)
    return root


# ---- what names an env --------------------------------------------------------------------------------------------

def test_the_key_is_the_content_not_the_file_name(tmp_path: Path) -> None:
    a = tree(tmp_path / "a", name="requirements.txt")
    (tmp_path / "b/deps").mkdir(parents=True)
    b = tree(tmp_path / "b", name="deps/other-name.txt", requirements=f"../wheels/{PKG}-1.0-py3-none-any.whl\n")
    c = tree(tmp_path / "c", name="reqs.txt")
    key_a = pyenv.env_key(a / "requirements.txt", a)[0]
    assert key_a == pyenv.env_key(c / "reqs.txt", c)[0]  # same bytes everywhere, other file name and folder
    assert key_a != pyenv.env_key(b / "deps/other-name.txt", b)[0]  # another line is another file


def test_a_changed_wheel_behind_the_same_line_is_a_new_env(tmp_path: Path) -> None:
    one, two = tree(tmp_path / "one", value=1), tree(tmp_path / "two", value=2)
    assert pyenv.env_key(one / "requirements.txt", one)[0] != pyenv.env_key(two / "requirements.txt", two)[0]


def test_included_files_and_local_folders_count(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "setup.py").write_text("v1")
    (root / "base.txt").write_text("numpy\n")
    (root / "requirements.txt").write_text("-r base.txt  # shared pins\n./pkg\nrequests>=2 ; python_version > '3' --hash=sha256:ab\n")
    before, found = pyenv.env_key(root / "requirements.txt", root)
    assert found.named == ["numpy", "requests>=2 ; python_version > '3'"]
    (root / "pkg" / "setup.py").write_text("v2")
    after = pyenv.env_key(root / "requirements.txt", root)[0]
    (root / "base.txt").write_text("numpy<2\n")
    assert len({before, after, pyenv.env_key(root / "requirements.txt", root)[0]}) == 3


def test_a_path_outside_the_workdir_or_missing_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "requirements.txt").write_text("/etc/passwd\n")
    with pytest.raises(Refused, match="outside the workdir"):
        pyenv.env_key(root / "requirements.txt", root)
    (root / "requirements.txt").write_text("-r missing.txt\n")
    with pytest.raises(Refused, match="missing.txt does not exist"):
        pyenv.env_key(root / "requirements.txt", root)
    (root / "requirements.txt").write_text("-e .\n")  # it would point into one run's copy of the code
    with pytest.raises(Refused, match="editable install"):
        pyenv.env_key(root / "requirements.txt", root)


def test_the_agents_packages_are_left_out_unless_a_line_wants_another_version() -> None:
    agent = {"torch": "2.13.0+cu128", "numpy": "2.1.0", "six": "1.16.0"}
    assert pyenv.excludes(["torch==2.13.0", "numpy", "einops"], agent) == ["numpy", "six", "torch"]
    assert pyenv.excludes(["torch==2.4.1", "numpy>=2,<3"], agent) == ["numpy", "six"]


# ---- built with uv, through the runner ----------------------------------------------------------------------------

IMPORT = f"""
import os, sys
import {PKG}
print({PKG}.VALUE, sys.prefix == os.environ["VIRTUAL_ENV"], os.environ["PATH"].split(os.pathsep)[0])
import spotsweep.trial, pika  # the agent's own packages are still there
"""


@pytest.fixture()
def code(tmp_path: Path) -> Path:
    # pika: the agent has it, so uv leaves it out and never looks for it (UV_OFFLINE below)
    return tree(tmp_path / "code", requirements=f"pika>=1\n./wheels/{PKG}-1.0-py3-none-any.whl\n")


@pytest.fixture()
def setup_kit(store: LocalArtifactStore, tmp_path: Path, code: Path, monkeypatch: pytest.MonkeyPatch) -> Kit:
    pytest.importorskip("uv")
    monkeypatch.setenv("UV_OFFLINE", "1")  # the agent's UV_* reach uv: no index is asked for anything
    return Kit(store, RunnerConfig(agent_id="test-agent", workdir=tmp_path / "work", code_dir=code,
                                   batch_points=50, batch_seconds=0.05))


def _stdout(kit: Kit, trial: str) -> str:
    return kit.store.get_bytes(log_key("sw", trial, 1, "stdout")).decode()


def test_a_trial_imports_what_its_requirements_name_and_the_next_reuses_the_env(setup_kit: Kit, tmp_path: Path) -> None:
    with pytest.raises(ImportError):
        __import__(PKG)  # the agent's environment lacks it
    msg = setup_kit.message(IMPORT, setup_pip="requirements.txt")
    final, _ = setup_kit.run(msg)
    assert final.outcome == "completed", final.error
    envs = list((tmp_path / "work/pyenvs/envs").glob("[!.]*"))
    assert len(envs) == 1
    assert _stdout(setup_kit, "sw.0").split() == ["42", "True", str(envs[0] / "bin")]
    (envs[0] / "built-once").touch()  # a rebuild would remove it
    final, _ = setup_kit.run(msg.model_copy(update={"trial_id": "sw.1"}))
    assert final.outcome == "completed", final.error
    assert list((tmp_path / "work/pyenvs/envs").glob("[!.]*")) == envs and (envs[0] / "built-once").exists()
    assert _stdout(setup_kit, "sw.1").split()[0] == "42"


def test_two_trials_at_once_wait_on_one_build(setup_kit: Kit, tmp_path: Path) -> None:
    results: list[Any] = []
    msgs = [setup_kit.message(IMPORT, setup_pip="requirements.txt").model_copy(update={"trial_id": f"sw.{i}"})
            for i in range(2)]
    threads = [threading.Thread(target=lambda m=m: results.append(setup_kit.run(m)[0])) for m in msgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.outcome for r in results] == ["completed", "completed"], [r.error for r in results]
    assert len(list((tmp_path / "work/pyenvs/envs").glob("[!.]*"))) == 1


def test_a_failed_build_fails_the_trial_for_good_with_the_installers_words(setup_kit: Kit, code: Path) -> None:
    (code / "requirements.txt").write_text("./wheels/not-a-wheel-9.9-py3-none-any.whl\n")
    (code / "wheels/not-a-wheel-9.9-py3-none-any.whl").write_text("garbage")
    final, events = setup_kit.run(setup_kit.message(IMPORT, setup_pip="requirements.txt"))
    assert final.outcome == "failed" and final.failure == "refused"
    assert [e.kind for e in events] == ["trial.staging"]  # said it was setting up; never started
    assert "setup.pip" in final.error and "uv pip install failed" in final.error and "not-a-wheel" in final.error


def test_a_requirements_file_not_in_the_workdir_is_refused(setup_kit: Kit) -> None:
    final, _ = setup_kit.run(setup_kit.message(IMPORT, setup_pip="nope.txt"))
    assert final.failure == "refused" and "nope.txt does not exist" in final.error


def test_unused_envs_are_evicted_past_the_cap_and_one_in_use_is_not(tmp_path: Path) -> None:
    base = tmp_path / "pyenvs"
    for i, key in enumerate(("old", "held", "new")):
        (base / "envs" / key).mkdir(parents=True)
        (base / "envs" / key / pyenv.READY).write_text("1000\n")
        (base / "locks").mkdir(exist_ok=True)
        os.utime(base / "envs" / key / pyenv.READY, (i, i))
    with (base / "locks" / "held.use").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # a trial runs in it
        assert pyenv.evict(base, 1500, keep="new") == ["old"]
        assert pyenv.evict(base, 1500, keep="new") == []  # held: kept, over the cap or not
    assert pyenv.evict(base, 1500, keep="new") == ["held"]
    assert [p.name for p in (base / "envs").iterdir()] == ["new"]


# ---- the spec key -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("setup", "error"), [
    ("{pip: ../requirements.txt}", "setup.pip: must be a file of the workdir, relative to it (got '../requirements.txt')"),
    ("{pip: /etc/requirements.txt}", "setup.pip: must be a file of the workdir, relative to it (got '/etc/requirements.txt')"),
    ("{pip: 3}", "setup.pip: Input should be a valid string (got 3)"),
    ("{conda: env.yaml}", "setup.conda: unknown key"),
])
def test_a_bad_setup_is_refused_naming_the_field_and_value(setup: str, error: str) -> None:
    from spotsweep.shared.errors import SpecError
    from spotsweep.shared.spec import load_spec

    base = "name: s\ncommand: [python, train.py]\nmetric: {name: loss}\nworkdir: .\n"
    assert load_spec(base + "setup: {pip: deps/requirements.txt}\n").setup.pip == "deps/requirements.txt"  # type: ignore[union-attr]
    with pytest.raises(SpecError) as e:
        load_spec(base + f"setup: {setup}\n")
    assert error in str(e.value)
