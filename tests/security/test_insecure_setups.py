"""The insecure setups of an agent (issue 28, item 4): trials as root refused unless allowed, and a shared
broker user said out loud (services/agent/insecure.py, docs/security.md "Insecure setups").

The decisions are pure functions, tested as a table; then the real ``spotsweep agent`` runs as a
process, as root (as CI runs), without and with the flag that allows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotsweep.services.agent.insecure import (
    ROOT_ALLOWED, ROOT_REFUSED, Verdict, root_trials, shared_user_warning, shares_planner_user,
)
from spotsweep.shared.runtime import ExitCode
from tests.support.servers import free_port

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the agent refuses only as root (CI runs as root)")


@pytest.mark.parametrize(("euid", "trial_user", "allow", "verdict"), [
    (0, None, False, Verdict.REFUSE),  # root, trials as root: refused by default
    (0, " , ", False, Verdict.REFUSE),  # a list naming nobody is no trial user
    (0, None, True, Verdict.WARN),  # --allow-root-trials: runs, and says so
    (0, "t1", False, Verdict.OK),  # trials as an unprivileged user
    (0, "t1,t2", True, Verdict.OK),  # the flag changes nothing when trials do not run as root
    (10001, None, False, Verdict.OK),  # not root: trials run as the agent's own user
    (10001, None, True, Verdict.OK),
])
def test_trials_as_root_are_refused_unless_allowed(euid: int, trial_user: str | None, allow: bool,
                                                   verdict: Verdict) -> None:
    assert root_trials(euid, trial_user, allow) is verdict


def test_an_agent_trusting_its_own_broker_user_is_the_shared_setup() -> None:
    assert shares_planner_user("guest", {"guest"})  # one user for everything (SPOTSWEEP_PLANNER_USER unset)
    assert shares_planner_user("spotsweep-planner", {"spotsweep-planner"})  # the agent given the planner's user
    assert not shares_planner_user("spotsweep-agent", {"spotsweep-planner"})  # users per role
    assert "'guest'" in shared_user_warning("guest", False) and "is unset" in shared_user_warning("guest", False)


def _agent(args: list[str], env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """``spotsweep agent ARGS`` as a process, as this test's user, with no allowance but ``env``'s."""
    base = {k: v for k, v in os.environ.items() if k != "SPOTSWEEP_ALLOW_ROOT_TRIALS"}  # tests/conftest.py sets it
    return subprocess.run([sys.executable, "-m", "spotsweep", "agent", "--class", "cpu", "--workdir", str(tmp / "w"),
                           *args], env={**base, "SPOTSWEEP_HOME": str(tmp / "home"), **env},
                          capture_output=True, text=True, timeout=120)


@as_root
@pytest.mark.parametrize(("args", "env"), [
    ([], {}),
    (["--no-allow-root-trials"], {"SPOTSWEEP_ALLOW_ROOT_TRIALS": "1"}),  # the flag wins over the variable
], ids=["default", "flag-over-variable"])
def test_an_agent_as_root_without_trial_user_refuses_to_start_in_one_line(
        args: list[str], env: dict[str, str], tmp_path: Path) -> None:
    # Nothing listens at the URL: the refusal comes before any connection (else: 69 after the timeout).
    unreachable = {"SPOTSWEEP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"}
    done = _agent([*args, "--startup-timeout", "2"], {**unreachable, **env}, tmp_path)
    assert done.returncode == ExitCode.UNSAFE == 78, done.stderr
    assert done.stderr.splitlines() == [f"error: {ROOT_REFUSED}"], done.stderr  # one line, no traceback
    assert "--trial-user" in ROOT_REFUSED and "--allow-root-trials" in ROOT_REFUSED


@as_root
def test_allowed_root_trials_and_a_shared_broker_user_each_warn_once(rabbit_url: str, tmp_path: Path) -> None:
    done = _agent(["--allow-root-trials", "--exit-when-idle", "1"], {"SPOTSWEEP_AMQP_URL": rabbit_url}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "agent ready" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count(ROOT_ALLOWED) == 1, done.stderr
    # guest, and no SPOTSWEEP_PLANNER_USER: the agent runs what its own credentials send.
    assert done.stderr.count(shared_user_warning("guest", False)) == 1, done.stderr


@as_root
def test_a_planner_user_of_its_own_is_not_the_shared_setup(rabbit_url: str, tmp_path: Path) -> None:
    done = _agent(["--exit-when-idle", "1"], {"SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_ALLOW_ROOT_TRIALS": "1",
                                              "SPOTSWEEP_PLANNER_USER": "spotsweep-planner"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(ROOT_ALLOWED) == 1, done.stderr  # the variable allows it as the flag does, and warns
    assert "insecure setup: this agent's broker user" not in done.stderr, done.stderr
