"""A process that left its trial's group (setsid) dies with the trial (services/agent/orphans.py)."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent import launch
from spotsweep.services.agent.orphans import PR_SET_CHILD_SUBREAPER
from spotsweep.services.agent.runner import RunControls
from tests.services.agent.conftest import Kit

# The trial starts a child in a session of its own (setsid), which writes its pid and then
# lives on; the trial itself exits at once, or is stopped by the planner.
LEAVES_A_SETSID_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
open(os.environ["PIDFILE"], "w").write(str(child.pid))
time.sleep({linger})
"""


def alive(pid: int) -> bool:
    """Running (a zombie is dead: only its parent's reaping is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture()
def reaping(kit: Any) -> Iterator[Any]:
    """The kit with the agent service's reaping on; this test process is no subreaper afterwards."""
    if not launch.REAPER.adopt():
        pytest.skip("no PR_SET_CHILD_SUBREAPER here")
    yield Kit(kit.store, replace(kit.config, reap_orphans=True))
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    launch.REAPER.adopted = False


@pytest.mark.parametrize(("linger", "stop"), [(0, False), (60, True)])
def test_a_setsid_child_dies_with_its_trial(reaping: Any, tmp_path: Path, linger: int, stop: bool) -> None:
    kit = reaping
    pidfile = tmp_path / "pid"
    msg = kit.message(LEAVES_A_SETSID_CHILD.replace("{linger}", str(linger)), env={"PIDFILE": str(pidfile)})
    # stop: the planner stops the run (pruned) once the child is there
    control = RunControls(stopped=lambda run_id: "pruned" if stop and pidfile.exists() and pidfile.read_text() else None)
    final, _ = kit.run(msg, control)
    child = int(pidfile.read_text())
    try:
        assert gone_within(child, 10), f"the setsid child {child} outlived its trial"
        assert final is None if stop else final.outcome == "completed"
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass
