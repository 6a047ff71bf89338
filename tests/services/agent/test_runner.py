"""The agent's trial runner under the process contract, with a local artifact store.

Real child processes, real files; the publish function just records events.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from waiting import wait_until  # tests/support
from spotsweep.services.agent.runner import Confirms, RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.checkpoints import latest_checkpoint, log_key
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.messages import CheckpointSaved, TrialMessage, TrialMetrics, TrialStarted


def message(script: str, attempt: int = 1, **params: Any) -> TrialMessage:
    return TrialMessage(
        sweep_id="sw", trial_id="sw.0", attempt=attempt, trial_name="t0", index=0, params=params,
        argv=["python", "-c", script], env={"EXTRA": "yes"}, metric="loss",
    )


class Events(list):  # type: ignore[type-arg]
    def of(self, kind: type) -> list[Any]:
        return [e for e in self if isinstance(e, kind)]


def run(store: LocalArtifactStore, config: RunnerConfig, msg: TrialMessage, control: RunControls | None = None,
        gpu: str | None = None) -> tuple[Any, Events]:
    events: list[Any] = []
    final = run_trial(msg, store, events.append, config, control or RunControls(), gpu)
    return final, Events(events)


def test_contract_environment_and_final_metrics(store: LocalArtifactStore, config: RunnerConfig) -> None:
    script = """
import json, os
from spotsweep import trial
env = {k: v for k, v in os.environ.items() if k.startswith("SPOTSWEEP_") or k in ("EXTRA", "CUDA_VISIBLE_DEVICES")}
print(json.dumps(env))
for step in range(120):
    trial.report(step, loss=1.0 / (step + 1), acc=step / 120)
trial.report(120, loss=0.001)
"""
    final, events = run(store, config, message(script, lr=0.1), gpu="3")
    assert final.outcome == "completed" and final.exit_code == 0
    assert final.metrics == {"loss": 0.001, "acc": 119 / 120}  # last value of each name
    assert final.last_step == 120
    started = events.of(TrialStarted)
    assert len(started) == 1 and started[0].resume_step is None
    points = [p for batch in events.of(TrialMetrics) for p in batch.points if not p.name.startswith("sys/")]
    assert len(points) == 241
    assert len(events.of(TrialMetrics)) >= 5  # batched by count (50 points)
    out = store.get_bytes(log_key("sw", "sw.0", 1, "stdout")).decode()
    env = json.loads(out)
    assert json.loads(env["SPOTSWEEP_PARAMS"]) == {"lr": 0.1}
    assert env["SPOTSWEEP_ATTEMPT"] == "1" and env["SPOTSWEEP_TRIAL_ID"] == "sw.0" and env["SPOTSWEEP_SWEEP_ID"] == "sw"
    assert env["EXTRA"] == "yes" and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert "SPOTSWEEP_RESUME_STEP" not in env


def test_bad_lines_are_skipped_not_fatal(store: LocalArtifactStore, config: RunnerConfig) -> None:
    script = """
import os
with open(os.environ["SPOTSWEEP_METRICS"], "a") as f:
    f.write("garbage\\n")
    f.write('{"step": "x", "loss": 1}\\n')
    f.write('{"step": 1, "loss": 0.5}\\n')
    f.write('{"step": 2, "loss": 0.25}')  # no newline at the end: still read at exit
"""
    final, events = run(store, config, message(script))
    assert final.outcome == "completed"
    assert [(p.step, p.value) for b in events.of(TrialMetrics) for p in b.points if p.name == "loss"] == [(1, 0.5), (2, 0.25)]


def test_failure_carries_the_stderr_tail(store: LocalArtifactStore, config: RunnerConfig) -> None:
    script = "import sys\nfor i in range(50): print('noise', i, file=sys.stderr)\nraise ValueError('lr too high')"
    final, _ = run(store, config, message(script))
    assert final.outcome == "failed" and final.exit_code == 1
    assert final.error.endswith("ValueError: lr too high")
    assert "noise 10" not in final.error  # only the tail


def test_command_not_found_is_a_failed_trial(store: LocalArtifactStore, config: RunnerConfig) -> None:
    msg = message("").model_copy(update={"argv": ["definitely-not-a-command-xyz"]})
    final, events = run(store, config, msg)
    assert final.outcome == "failed" and "definitely-not-a-command-xyz" in final.error
    assert events.of(TrialStarted) == []


CKPT_SCRIPT = """
import os, sys
from spotsweep import trial
state = trial.checkpoint_dir / "step.txt"
start = int(state.read_text()) if trial.resume_step is not None else 0
assert trial.resume_step is None or trial.resume_step == start
for step in range(start + 1, 7):
    trial.report(step, loss=10.0 - step)
    if step % 2 == 0:
        state.write_text(str(step))
        trial.checkpoint_saved(step)
    if step == 5 and trial.attempt == 1:
        sys.exit(1)
"""


def test_checkpoints_are_uploaded_and_restored_for_the_next_attempt(store: LocalArtifactStore, config: RunnerConfig) -> None:
    final, events = run(store, config, message(CKPT_SCRIPT))
    assert final.outcome == "failed"
    assert [e.step for e in events.of(CheckpointSaved)] == [2, 4]
    assert latest_checkpoint(store, "sw", "sw.0") == 4
    final, events = run(store, config, message(CKPT_SCRIPT, attempt=2))
    assert final.outcome == "completed"
    assert events.of(TrialStarted)[0].resume_step == 4
    steps = [p.step for b in events.of(TrialMetrics) for p in b.points if not p.name.startswith("sys/")]
    assert steps == [5, 6]  # resumed after step 4, not from 0
    assert final.metrics == {"loss": 4.0}


def test_preemption_forwards_sigterm_and_keeps_the_final_checkpoint(store: LocalArtifactStore, config: RunnerConfig,
                                                                    tmp_path: Path) -> None:
    ready = tmp_path / "handler-installed"
    script = f"""
import signal, sys, time
from spotsweep import trial
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
open({str(ready)!r}, "w").close()
step = 0
while not stop:
    step += 1
    trial.report(step, loss=1.0)
    time.sleep(0.02)
(trial.checkpoint_dir / "s").write_text(str(step))
trial.checkpoint_saved(step)
sys.exit(143)
"""
    control = RunControls(grace=10)
    # Preempted once its handler is in (a SIGTERM before would end it at once, as any untrapped process).
    threading.Thread(target=lambda: wait_until(ready.exists, 60) and control.preempt.set(), daemon=True).start()
    final, events = run(store, config, message(script), control)  # it runs until its SIGTERM
    assert final.outcome == "preempted"
    saved = events.of(CheckpointSaved)
    assert len(saved) == 1 and latest_checkpoint(store, "sw", "sw.0") == saved[0].step > 0


def test_preempted_trial_that_ignores_sigterm_is_killed_after_grace(store: LocalArtifactStore, config: RunnerConfig) -> None:
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"
    control = RunControls(grace=0.5)
    threading.Timer(1.0, control.preempt.set).start()  # after the script ignores SIGTERM
    final, _ = run(store, config, message(script), control)
    assert final.outcome == "preempted" and final.exit_code == -9  # SIGKILLed after the grace, not waited for (it would exit 0)

def test_cancelled_sweep_kills_the_trial(store: LocalArtifactStore, config: RunnerConfig) -> None:
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    final, _ = run(store, config, message("import time; time.sleep(60)"), RunControls(cancelled=flag.is_set))
    assert final.outcome == "cancelled"


def test_python_means_the_agents_interpreter(store: LocalArtifactStore, config: RunnerConfig) -> None:
    final, _ = run(store, config, message("import sys; print(sys.executable)"))
    assert store.get_bytes(log_key("sw", "sw.0", 1, "stdout")).decode().strip() == sys.executable
    assert final.outcome == "completed"


def test_an_invalid_checkpoint_is_skipped_and_the_trial_goes_on(store: LocalArtifactStore, config: RunnerConfig) -> None:
    script = "from spotsweep import trial\ntrial.checkpoint_saved(3)\ntrial.report(4, loss=0.5)"  # nothing in the dir
    final, events = run(store, config, message(script))
    assert final.outcome == "completed" and final.metrics == {"loss": 0.5}
    assert events.of(CheckpointSaved) == [] and latest_checkpoint(store, "sw", "sw.0") is None


class _CheckpointsFail(LocalArtifactStore):
    """A store that refuses every checkpoint object with ``error`` (logs go through)."""

    error: Exception = RuntimeError()

    def put_file(self, key: str, path: Path) -> str:
        if "/checkpoints/" in key:
            raise self.error
        return super().put_file(key, path)

    def put_bytes(self, key: str, data: bytes) -> str:
        if "/checkpoints/" in key:
            raise self.error
        return super().put_bytes(key, data)


@pytest.mark.parametrize("error", [PermanentError("s3: AccessDenied on the checkpoint prefix"),
                                   RuntimeError("a client bug or an error the adapter does not translate")])
def test_a_checkpoint_the_store_refuses_is_not_charged_to_the_trial(tmp_path: Path, config: RunnerConfig,
                                                                   error: Exception) -> None:
    store = _CheckpointsFail(tmp_path / "store")
    store.error = error
    script = ("import os\nfrom spotsweep import trial\n"
              "open(os.path.join(os.environ['SPOTSWEEP_CHECKPOINT_DIR'], 'w.bin'), 'wb').write(b'x' * 10)\n"
              "trial.checkpoint_saved(3)\ntrial.report(4, loss=0.5)\nprint('done')")
    final, events = run(store, config, message(script))
    assert final.outcome == "completed" and final.metrics == {"loss": 0.5}
    assert events.of(CheckpointSaved) == [] and latest_checkpoint(store, "sw", "sw.0") is None
    assert store.get_bytes(log_key("sw", "sw.0", 1, "stdout")) == b"done\n"  # the run's other uploads went on


def test_a_lost_connection_stops_the_trial_without_reporting_it(store: LocalArtifactStore, config: RunnerConfig) -> None:
    from spotsweep.shared.errors import RetryableError

    control = RunControls()
    threading.Timer(0.5, control.lost.set).start()
    started = time.monotonic()
    with pytest.raises(RetryableError, match="redelivered") as lost:
        run(store, config, message("import time; time.sleep(60)"), control)
    assert time.monotonic() - started < 10
    # How long it ran goes into the trial.lost notice: timeout.total counts lost runs too.
    assert 0.3 < lost.value.duration < 10  # type: ignore[attr-defined]


def test_the_agent_failing_on_a_trial_reports_a_failed_attempt(tmp_path: Path, delivery: Any) -> None:
    """Not the trial's fault, but the planner must hear of it, or the trial hangs."""
    from spotsweep.services.agent.handlers import Agent, Connection, Slots, handle_trial
    from spotsweep.shared.broker.memory import MemoryBroker
    from spotsweep.shared.messages import TrialFinished, decode, encode
    from spotsweep.shared import topology

    broker = MemoryBroker()
    broker.declare(topology.service_queues(("cpu",)))
    seen: list[Any] = []
    broker.consume(topology.PLANNER_EVENTS_QUEUE, lambda d: (seen.append(decode(d.body)), d.ack()), prefetch=100)
    (tmp_path / "file").write_text("")  # the workdir's parent is a file: mkdtemp fails with an OSError
    deps = Connection(broker, Agent(store=LocalArtifactStore(tmp_path / "a"), slots=Slots(1, None),
                                    config=RunnerConfig(agent_id="a1", workdir=tmp_path / "file" / "work")))
    d = delivery(encode(message("print(1)")))
    handle_trial(d, deps)
    assert d.settled == "ack"
    wait_until(lambda: any(isinstance(e, TrialFinished) for e in seen))
    final = [e for e in seen if isinstance(e, TrialFinished)]
    assert len(final) == 1 and final[0].outcome == "failed" and "agent a1 error" in final[0].error


def test_the_final_event_waits_for_the_points_confirms_but_not_the_start_s() -> None:
    """A trial's points must be on the broker before its end is reported; its
    start need not be (the planner takes an end it never saw start), so a
    short trial's slot is not held for the start's round trip."""
    futures: dict[str, Future[None]] = {}

    def publish(event: Any) -> Future[None]:
        futures[event.kind] = Future()
        return futures[event.kind]

    send = Confirms(publish)
    send(TrialStarted(sweep_id="sw", trial_id="sw.0", attempt=1, agent="a", run_id="r"))
    send(TrialMetrics(sweep_id="sw", trial_id="sw.0", attempt=1, steps=[1], names=["loss"], values=[0.5]))
    waiter = threading.Thread(target=send.wait)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # the points are not confirmed yet
    futures["trial.metrics"].set_result(None)
    waiter.join(5)
    assert not waiter.is_alive() and not futures["trial.started"].done()


def test_a_start_the_broker_refused_fails_the_run() -> None:
    """At once, or by the time the final event is due: the run is void and the
    trial goes back to the queue (its end must not be reported without it)."""
    def refused(event: Any) -> Future[None]:
        future: Future[None] = Future()
        future.set_exception(RetryableError("nacked"))
        return future

    with pytest.raises(RetryableError):
        Confirms(refused)(TrialStarted(sweep_id="sw", trial_id="sw.0", attempt=1, agent="a", run_id="r"))
    later: Future[None] = Future()
    send = Confirms(lambda event: later)
    send(TrialStarted(sweep_id="sw", trial_id="sw.0", attempt=1, agent="a", run_id="r"))
    later.set_exception(RetryableError("nacked"))
    with pytest.raises(RetryableError):
        send.wait()


def test_a_run_over_within_one_poll_sends_its_start_as_its_own_message(store: LocalArtifactStore, tmp_path: Path) -> None:
    """A trial that ends at once (a bad config, a crash on import) still sends
    its start first and on its own: the end never carries it (schema v4's
    start-inside-end is retired; the planner only still decodes it)."""
    config = RunnerConfig(agent_id="a", workdir=tmp_path / "work", poll_seconds=30.0)
    msg = message("").model_copy(update={"argv": ["/bin/true"]})
    final, events = run(store, config, msg)
    assert final.outcome == "completed" and final.started is None
    starts = events.of(TrialStarted)
    assert len(starts) == 1 and events[0] is starts[0] and starts[0].run_id == final.run_id and starts[0].agent == "a"
    assert (starts[0].redelivered, starts[0].losses, starts[0].resume_step) == (False, 0, None)


def test_a_run_that_outlives_one_poll_sends_its_start_while_it_runs(store: LocalArtifactStore, tmp_path: Path) -> None:
    """The trial ends only once its start was sent (it waits for a file the
    publish function writes on seeing the start): no clock in the test."""
    config = RunnerConfig(agent_id="a", workdir=tmp_path / "work", poll_seconds=0.05)
    seen_start = tmp_path / "seen-start"
    events: list[Any] = []

    def publish(event: Any) -> None:
        events.append(event)
        if isinstance(event, TrialStarted):
            seen_start.touch()

    script = (f"import os, sys, time\nfor _ in range(3000):\n    if os.path.exists({str(seen_start)!r}): sys.exit(0)\n"
              "    time.sleep(0.01)\nsys.exit(3)")
    final = run_trial(message(script), store, publish, config, RunControls())
    assert final is not None and final.outcome == "completed", final and final.error  # exit 3: no start while it ran
    starts = [e for e in events if isinstance(e, TrialStarted)]
    assert len(starts) == 1 and starts[0].run_id == final.run_id and final.started is None


def test_the_start_is_sent_before_the_process_runs_a_poll(store: LocalArtifactStore, tmp_path: Path) -> None:
    """Not up to one poll late: with a poll of 30 s the start is out while
    the trial runs (it waits for a file the publish function writes on
    seeing the start, and would fail after 3 s)."""
    config = RunnerConfig(agent_id="a", workdir=tmp_path / "work", poll_seconds=30.0)
    seen_start = tmp_path / "seen-start"
    events: list[Any] = []

    def publish(event: Any) -> None:
        events.append(event)
        if isinstance(event, TrialStarted):
            seen_start.touch()

    script = (f"import os, sys, time\nfor _ in range(300):\n    if os.path.exists({str(seen_start)!r}): sys.exit(0)\n"
              "    time.sleep(0.01)\nsys.exit(3)")
    final = run_trial(message(script), store, publish, config, RunControls())
    assert final is not None and final.outcome == "completed", final and final.error
    assert isinstance(events[0], TrialStarted)

