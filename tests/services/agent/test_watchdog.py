"""Trials die with their agent: kill -9 of the agent alone leaves no trial process running.

The "agent" here is a real process running one attempt through the real
runner; the trial script starts a child of its own (as torchrun or a data
loader would), and both must be gone soon after the agent is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from waiting import alive, wait_until
from spotsweep.services.agent.watchdog import Watchdog

NO_SUCH_GROUP = 2**22 + 12345  # above Linux's default pid_max: never a live group

AGENT = """
import sys
from pathlib import Path
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.messages import TrialMessage

tmp = Path(sys.argv[1])
script = sys.argv[2]
msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                   argv=["python", "-c", script], metric="loss")
run_trial(msg, LocalArtifactStore(tmp / "artifacts"), lambda e: None, RunnerConfig("a", tmp / "work"), RunControls())
"""

TRIAL = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open({pids!r} + ".tmp", "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
os.rename({pids!r} + ".tmp", {pids!r})
time.sleep(120)
"""


def test_kill_9_of_the_agent_kills_the_trial_and_its_children(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    agent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(AGENT), str(tmp_path),
                              textwrap.dedent(TRIAL.format(pids=str(pids_file)))])
    try:
        assert wait_until(pids_file.exists), "the trial did not start"
        trial, child = (int(p) for p in pids_file.read_text().split())
        assert alive(trial) and alive(child)
        agent.send_signal(signal.SIGKILL)  # the agent alone, as the OOM killer would
        agent.wait()
        assert wait_until(lambda: not alive(trial) and not alive(child)), "a trial process outlived its agent"
    finally:
        agent.kill()
        agent.wait()


def test_a_trial_started_but_not_yet_registered_dies_too(tmp_path: Path) -> None:
    """The instant between starting a trial and telling the watchdog: the agent's token in its environment covers it."""
    dog = Watchdog()
    dog.add(NO_SUCH_GROUP)  # any registration starts the watchdog process
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env={**os.environ, "SPOTSWEEP_AGENT_TOKEN": dog.token})
    try:
        dog.close()  # what the agent's death does to the pipe
        assert wait_until(lambda: proc.poll() is not None), "an unregistered trial with the token outlived the agent"
    finally:
        proc.kill()
        proc.wait()


def test_a_watchdog_that_died_is_replaced_and_told_every_live_group(tmp_path: Path) -> None:
    dog = Watchdog()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        dog.add(proc.pid)
        first = dog._proc
        assert first is not None
        first.kill()  # the OOM killer took the watchdog
        first.wait()
        other = subprocess.Popen(["sleep", "120"], start_new_session=True)
        try:
            dog.add(other.pid)  # finds it dead, starts another, re-registers both groups
            assert dog._proc is not first
            dog.close()
            assert wait_until(lambda: proc.poll() is not None and other.poll() is not None)
        finally:
            other.kill()
            other.wait()
    finally:
        proc.kill()
        proc.wait()


def test_what_a_trial_leaves_running_in_its_group_ends_with_it(tmp_path: Path) -> None:
    """A completed trial's background children (a data loader, a forgotten job) do not outlive it."""
    from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
    from spotsweep.shared.artifacts.local import LocalArtifactStore
    from spotsweep.shared.messages import TrialMessage

    pid_file = tmp_path / "child"
    script = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
              f"open({str(pid_file)!r}, 'w').write(str(c.pid))")
    msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                       argv=["python", "-c", script], metric="loss")
    final = run_trial(msg, LocalArtifactStore(tmp_path / "a"), lambda e: None, RunnerConfig("a", tmp_path / "w"), RunControls())
    assert final is not None and final.outcome == "completed"
    child = int(pid_file.read_text())
    assert wait_until(lambda: not alive(child)), "a background child outlived its completed trial"


def test_carriers_are_the_processes_whose_environment_holds_the_token() -> None:
    """psutil finds them (a trial that left its group still carries the token)."""
    from spotsweep.services.agent.watchdog import TOKEN_VAR, _carriers

    token = "t" + os.urandom(8).hex()
    env = dict(os.environ, **{TOKEN_VAR: token})
    carrier = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_until(lambda: carrier.pid in _carriers(token), timeout=10)
        assert other.pid not in _carriers(token)
    finally:
        carrier.kill()
        other.kill()
        carrier.wait()
        other.wait()
