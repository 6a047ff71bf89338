"""setup.pip envs are private to the sweeps that run in them (issue 39, item 6): each built env behind a gate of its
own (tree_gate.py), passed only by a trial started in that env. Two real uv builds as one trial user (the hardest
case: two sweeps' trials as the same uid), each trial started the way the agent starts it (launch.py), so its
supplementary groups are the ones the agent computes. Not through the full services: the agent's Python here
lives under /root (0700), which no trial user can run, so the envs are built on the system's Python."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotsweep.services.agent import launch, pyenv, tree_gate
from spotsweep.services.agent.trial_user import TrialUser, resolve
from tests.services.agent.test_pyenv import PKG, tree
from tests.services.agent.test_pyenv_requirements import USER

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                                reason="gates are made by an agent running as root; builds as another user")

# What the trial imports from its env, and which of the paths it is given (another sweep's) it could list or read.
PROBE = ("import os, sys, " + PKG + "\ngot = 0\nfor p in sys.argv[1:]:\n    try:\n"
         "        os.listdir(p) if os.path.isdir(p) else open(p).read()\n        got += 1\n    except OSError:\n"
         "        pass\nprint(" + PKG + ".VALUE, got)\n")


@pytest.fixture()
def top(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder the trial user can reach (pytest's tmp_path is root's alone), envs built offline on /usr/bin/python3."""
    pytest.importorskip("uv")
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setattr(pyenv.sys, "executable", "/usr/bin/python3")
    path = Path(tempfile.mkdtemp(prefix="spotsweep-pyenv-gate-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(env: Path, cwd: Path, user: TrialUser, *paths: Path) -> str:
    """A trial in ``env`` as the agent launches it (its groups computed by launch.py), trying ``paths``."""
    msg: Any = SimpleNamespace(argv=["python", "-c", PROBE, *map(str, paths)], inputs=[])
    config: Any = SimpleNamespace(runtime=None)
    with tempfile.TemporaryFile() as out:
        proc = launch._spawn(launch.Launch({b"PATH": b"/usr/bin"}, cwd, env), msg, config, None, user, "t", out, out)
        proc.wait(timeout=60)
        out.seek(0)
        return out.read().decode().strip()


def test_a_trial_runs_in_its_own_env_and_cannot_list_or_read_another_sweeps(top: Path) -> None:
    user = resolve(USER)
    a, b = tree(top / "code-a", value=42), tree(top / "code-b", value=7)  # sweep A's private wheel, and B's
    subprocess.run(["chmod", "-R", "a+rX", str(a), str(b)], check=True)
    base = top / "pyenvs"
    with pyenv.lease(base, a / "requirements.txt", a, 2**30, no_build=True, user=user) as env_a, \
            pyenv.lease(base, b / "requirements.txt", b, 2**30, no_build=True, user=user) as env_b:
        gids = {env_a.stat().st_gid, env_b.stat().st_gid}
        assert len(gids) == 2 and all(tree_gate.ENVS <= g < tree_gate.ENVS + tree_gate.SPAN for g in gids)
        assert [stat.S_IMODE(p.stat().st_mode) for p in (base, base / "envs", env_a)] == [0o711, 0o711, 0o750]
        (module,) = env_a.glob(f"lib/python*/site-packages/{PKG}/__init__.py")
        a_paths = (base, base / "envs", env_a, env_a / "lib", module, env_a / "pyvenv.cfg")
        assert _run(env_a, a, user) == "42 0"  # A's trial imports from its env
        assert _run(env_b, b, user, *a_paths) == "7 0"  # B's runs in its own, and reaches nothing of A's

        env_a.chmod(0o755)  # as built before gates: open to all, root's group
        os.chown(env_a, 0, 0)
    with pyenv.lease(base, a / "requirements.txt", a, 2**30, no_build=True, user=user) as again:
        assert again == env_a and tree_gate.is_gate(again.stat().st_gid)  # gated when next used
        assert stat.S_IMODE(again.stat().st_mode) == 0o750 and _run(again, a, user) == "42 0"
