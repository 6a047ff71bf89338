"""A trial cannot outlive a cancel or a preemption (issue 19 section 1).

The agent kills the trial's whole process group when its main process is
done (services/agent/runner.py) and its watchdog does when the agent dies
(tests/services/agent/test_watchdog.py). Here the trial starts a background
child (``nohup sleep &``, as a forgotten job would) and the run is cancelled
or preempted: the child is gone when the run is over. What escapes a
process group (``setsid`` plus a double fork, with the environment cleared)
is out of reach: docs/security.md says so.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from waiting import alive, wait_until

from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.messages import TrialMessage

SCRIPT = 'nohup sleep 300 >/dev/null 2>&1 & echo $! > "$PIDFILE"; sleep 300'


@pytest.mark.parametrize("how", ["cancel", "preempt"])
def test_a_background_child_dies_with_its_trial(tmp_path: Path, how: str) -> None:
    pidfile = tmp_path / "child.pid"
    msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                       argv=["/bin/sh", "-c", SCRIPT], env={"PIDFILE": str(pidfile)}, metric="loss")
    def child_started() -> bool:
        return pidfile.exists() and pidfile.read_text().strip() != ""

    control = RunControls(grace=5, cancelled=child_started if how == "cancel" else lambda: False)
    if how == "preempt":
        threading.Thread(target=lambda: wait_until(child_started, timeout=60) and control.preempt.set(),
                         daemon=True).start()
    config = RunnerConfig(agent_id="test-agent", workdir=tmp_path / "work")
    final = run_trial(msg, LocalArtifactStore(tmp_path / "store"), lambda e: None, config, control)
    assert final is not None and final.outcome == ("cancelled" if how == "cancel" else "preempted"), final
    child = int(pidfile.read_text())
    assert wait_until(lambda: not alive(child), timeout=10), f"the trial's background child {child} outlived it"
