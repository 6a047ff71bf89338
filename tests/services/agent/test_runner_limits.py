"""The runner's limits and stops: hung trials, time budgets, CUDA OOM exits, and
runs the planner stops. Real child processes, a local artifact store."""

from __future__ import annotations

import threading
import time
from typing import Any

from spotsweep.services.agent.runner import RunControls
from spotsweep.shared.messages import CheckpointSaved, TrialFinished, TrialStarted

HANGS_AFTER_TWO = """
import time
from spotsweep import trial
trial.report(1, loss=1.0)
trial.report(2, loss=0.5)
time.sleep(60)
"""


def test_a_trial_silent_for_longer_than_the_stall_timeout_is_killed_as_failed(kit: Any) -> None:
    final, _ = kit.run(kit.message(HANGS_AFTER_TWO, stall_timeout=1.0))  # left alone it would complete in 60 s
    assert final.outcome == "failed" and final.failure == "stalled"
    assert "timeout.stall" in final.error and final.metrics == {"loss": 0.5}


def test_heartbeats_keep_a_quiet_trial_alive(kit: Any) -> None:
    script = """
import time
from spotsweep import trial
for _ in range(16):
    time.sleep(0.25)
    trial.heartbeat()
trial.report(1, loss=0.1)
"""
    # 4 s in all, never 3 s without a line (3 s: room for the interpreter's start on a loaded machine)
    final, _ = kit.run(kit.message(script, stall_timeout=3.0))
    assert final.outcome == "completed" and final.metrics == {"loss": 0.1}


def test_the_total_timeout_counts_the_running_time_of_earlier_attempts(kit: Any) -> None:
    # 1 s was left of the 100: a timeout counting only this attempt would let the 60 s trial complete
    final, _ = kit.run(kit.message("import time; time.sleep(60)", total_timeout=100.0, elapsed=99.0))
    assert final.outcome == "failed" and final.failure == "timeout" and "timeout.total" in final.error
    assert final.duration is not None and final.duration >= 0.9


def test_a_cuda_out_of_memory_exit_is_classified_for_the_retry_policy(kit: Any) -> None:
    script = ("import sys\nprint('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n"
              "sys.exit(1)")
    final, _ = kit.run(kit.message(script))
    assert final.outcome == "failed" and final.failure == "oom"
    final, _ = kit.run(kit.message("raise SystemExit('plain bug')"))
    assert final.failure == "exit"


def test_a_run_the_planner_stops_is_killed_and_not_reported(kit: Any) -> None:
    stops: dict[str, str] = {}
    control = RunControls(stopped=stops.get)
    events: list[Any] = []

    def publish(event: Any) -> None:
        events.append(event)
        if isinstance(event, TrialStarted):
            threading.Timer(0.3, lambda: stops.__setitem__(event.run_id, "duplicate")).start()

    from spotsweep.services.agent.runner import run_trial

    started = time.monotonic()
    final = run_trial(kit.message("import time; time.sleep(60)"), kit.store, publish, kit.config, control)
    assert final is None and time.monotonic() - started < 10
    assert not any(isinstance(e, TrialFinished) for e in events)


def test_every_run_has_its_own_id_and_says_if_it_was_redelivered(kit: Any) -> None:
    first, events1 = kit.run(kit.message("print(1)"))
    second, events2 = kit.run(kit.message("print(1)"), redelivered=True, losses=2)
    # each start is its own message, sent when the process starts
    s1, s2 = events1.of(TrialStarted)[0], events2.of(TrialStarted)[0]
    assert s1.run_id and s1.run_id != s2.run_id and first.run_id == s1.run_id and second.run_id == s2.run_id
    assert (s1.redelivered, s1.losses, s2.redelivered, s2.losses) == (False, 0, True, 2)


def test_trials_die_with_their_agent_even_when_it_is_killed_outright(tmp_path: Any) -> None:
    """An agent killed with SIGKILL cannot stop its trials; they must not run on, unsupervised."""
    import os
    import signal
    import subprocess
    import sys

    pidfile = tmp_path / "trial.pid"
    agent = f"""
import os, pathlib, tempfile
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.messages import TrialMessage
script = "import os, pathlib, time; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); time.sleep(60)"
msg = TrialMessage(sweep_id="s", trial_id="s.0", attempt=1, trial_name="t", index=0, params={{}},
                   argv=["python", "-c", script], metric="loss")
run_trial(msg, LocalArtifactStore(pathlib.Path({str(tmp_path)!r}) / "a"), lambda e: None,
          RunnerConfig(agent_id="x", workdir=pathlib.Path({str(tmp_path)!r}) / "w"), RunControls())
"""
    proc = subprocess.Popen([sys.executable, "-c", agent])
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    trial_pid = int(pidfile.read_text())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(trial_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(trial_pid, signal.SIGKILL)
        raise AssertionError("the trial outlived its agent")


def test_a_resumed_run_ends_with_the_metrics_its_lost_predecessor_reported_up_to_the_checkpoint(kit: Any) -> None:
    """The run that reported them died before its final event; the checkpoint kept them."""
    import pytest

    from spotsweep.services.agent.runner import DeliveryLost

    script = """
import time
from spotsweep import trial
done = trial.checkpoint_dir / "done"
if done.exists():
    raise SystemExit(0)  # finished before the interruption: nothing more to report
for step in (1, 2, 3):
    trial.report(step, loss=1.0 / step, acc=step / 10)
done.write_text("3")
trial.checkpoint_saved(3)
time.sleep(60)
"""
    control = RunControls()
    threading.Timer(1.5, control.lost.set).start()
    with pytest.raises(DeliveryLost):
        kit.run(kit.message(script), control)
    final, _ = kit.run(kit.message(script), redelivered=True, losses=1)
    assert final.outcome == "completed" and final.metrics == {"loss": 1.0 / 3, "acc": 0.3}


def test_a_checkpoint_newer_than_its_line_is_committed_only_after_every_point_before_it(kit: Any) -> None:
    """The script may rewrite the checkpoint as soon as it is complete again; when the
    agent reads the line late, its snapshot holds the newer state, and the points up
    to that state must already be published, or a resume from it would skip them."""
    from spotsweep.shared.artifacts.checkpoints import restore_checkpoint
    from spotsweep.shared.messages import CheckpointSaved, TrialMetrics

    script = """
import os, time
from spotsweep import trial
state = trial.checkpoint_dir / "state"
def save(step):
    tmp = trial.checkpoint_dir / "tmp"
    tmp.write_text(str(step))
    os.replace(tmp, state)
for step in range(1, 4):
    trial.report(step, loss=step)
save(3)
trial.checkpoint_saved(3)
for step in range(4, 7):  # at once: the agent reads the line above after these
    trial.report(step, loss=step)
save(6)
time.sleep(0.5)
"""
    final, events = kit.run(kit.message(script))
    assert final.outcome == "completed"
    restored = kit.config.workdir / "restored"
    assert restore_checkpoint(kit.store, "sw", "sw.0", restored) == 3
    content = int((restored / "state").read_text())
    saved_at = next(i for i, e in enumerate(events) if isinstance(e, CheckpointSaved))
    published = {p.step for e in events[:saved_at] if isinstance(e, TrialMetrics) for p in e.points if p.name[:4] != "sys/"}
    assert set(range(1, content + 1)) <= published


def test_the_agents_upload_after_the_exit_is_not_the_trials_time(tmp_path: Any, config: Any) -> None:
    """timeout.total covers the trial's process: a checkpoint the agent is still uploading when the
    process exits (0) neither fails the trial for timeout.total nor adds to its duration."""
    from pathlib import Path

    from spotsweep.shared.artifacts.local import LocalArtifactStore
    from tests.services.agent.conftest import Kit

    class SlowStore(LocalArtifactStore):
        def put_file(self, key: str, path: Path) -> str:
            if "/checkpoints/" in key:
                time.sleep(4.0)  # the store is slow; the trial has long exited by the time this returns
            return super().put_file(key, path)

    script = """
import os, pathlib, time
from spotsweep import trial
pathlib.Path(os.environ["SPOTSWEEP_CHECKPOINT_DIR"], "state").write_text("1")
trial.report(1, loss=0.5)
trial.checkpoint_saved(1)
time.sleep(0.5)
"""
    kit = Kit(SlowStore(tmp_path / "slow"), config)
    final, events = kit.run(kit.message(script, total_timeout=3.0))
    assert final.outcome == "completed" and final.failure is None, final
    assert final.duration is not None and final.duration < 3.0, final.duration  # not the 4 s upload
    assert [e.step for e in events.of(CheckpointSaved)] == [1]
