"""A graceful preemption that arrives while a checkpoint upload is in flight, over moto's S3
behind a TCP proxy (bench/s3_proxy.py): the upload finishes within the grace when the store is
fast enough and the checkpoint counts; otherwise it is abandoned, the trial is reported preempted
(never failed) and resumes from the previous complete checkpoint, never from the partial one."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from waiting import wait_until  # tests/support
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.checkpoints import checkpoint_prefix, latest_checkpoint, restore_checkpoint
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.messages import CheckpointSaved, TrialMessage

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
from s3_proxy import DelayProxy  # noqa: E402

MiB = 1 << 20

# Commits a small checkpoint, waits for the test's go, writes a large one and says so, then
# trains on; STUBBORN: through the SIGTERM too (a trial stuck in a long step) until the agent kills it.
SCRIPT = """
import os, pathlib, signal, time
from spotsweep import trial
if os.environ["STUBBORN"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(trial.checkpoint_dir / "model.pt").write_bytes(b"step one")
trial.checkpoint_saved(1)
go = pathlib.Path(os.environ["GO"])
while not go.exists():
    time.sleep(0.02)
(trial.checkpoint_dir / "model.pt").write_bytes(os.urandom(int(os.environ["BIG"])))
trial.checkpoint_saved(2)
(go.parent / "announced").write_text("")
time.sleep(600)
"""


def preempted_mid_upload(s3_env: dict[str, str], tmp_path: Path, grace: float, rate: float | None,
                         big: int, stubborn: bool) -> tuple[Any, list[Any], S3ArtifactStore]:
    """Run the script; preempt once its large checkpoint is announced (so the agent is uploading it or about to)."""
    port = int(s3_env["SPOTSWEEP_S3_ENDPOINT"].rsplit(":", 1)[1])
    with DelayProxy(port, delay=0.005, rate=rate) as proxy:
        store = S3ArtifactStore(proxy.endpoint, s3_env["SPOTSWEEP_S3_ACCESS_KEY"], s3_env["SPOTSWEEP_S3_SECRET_KEY"],
                                s3_env["SPOTSWEEP_S3_BUCKET"], region=s3_env["SPOTSWEEP_S3_REGION"])
        go = tmp_path / "signals" / "go"
        go.parent.mkdir()
        msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                           argv=["python", "-c", SCRIPT], metric="loss", env={"GO": str(go), "BIG": str(big), "STUBBORN": str(int(stubborn))})
        control = RunControls(grace=grace)
        config = RunnerConfig(agent_id="a1", workdir=tmp_path / "work")
        events: list[Any] = []
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(run_trial(msg, store, events.append, config, control)))
        runner.start()
        wait_until(lambda: any(isinstance(e, CheckpointSaved) for e in events), timeout=60)
        go.touch()
        wait_until(lambda: (go.parent / "announced").exists(), timeout=60)
        control.preempt.set()
        runner.join(120)
        assert not runner.is_alive()
    direct = S3ArtifactStore(s3_env["SPOTSWEEP_S3_ENDPOINT"], s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
                             s3_env["SPOTSWEEP_S3_SECRET_KEY"], s3_env["SPOTSWEEP_S3_BUCKET"],
                             region=s3_env["SPOTSWEEP_S3_REGION"])
    return result[0], events, direct


@pytest.mark.timeout(180)
def test_an_upload_that_cannot_finish_within_the_grace_is_abandoned_and_the_trial_resumes_from_the_previous(
        s3_env: dict[str, str], tmp_path: Path) -> None:
    # 48 MiB through a 4 MiB/s link cannot go within a 1 s grace.
    final, events, store = preempted_mid_upload(s3_env, tmp_path, grace=1.0, rate=4 * MiB, big=48 * MiB,
                                                  stubborn=True)
    assert final.outcome == "preempted", final  # not failed, not lost
    assert [e.step for e in events if isinstance(e, CheckpointSaved)] == [1]
    assert latest_checkpoint(store, "sw", "sw.0") == 1
    assert restore_checkpoint(store, "sw", "sw.0", tmp_path / "resumed") == 1  # never the partial step 2
    assert (tmp_path / "resumed" / "model.pt").read_bytes() == b"step one"
    step2 = [k for k in store.list(checkpoint_prefix("sw", "sw.0")) if "/000000000002-" in k]
    assert not [k for k in step2 if k.endswith("/MANIFEST")]


@pytest.mark.timeout(180)
def test_an_upload_in_flight_at_a_preemption_finishes_within_the_grace_and_counts(
        s3_env: dict[str, str], tmp_path: Path) -> None:
    final, events, store = preempted_mid_upload(s3_env, tmp_path, grace=60.0, rate=None, big=24 * MiB,
                                                  stubborn=False)
    assert final.outcome == "preempted", final
    assert [e.step for e in events if isinstance(e, CheckpointSaved)] == [1, 2]
    assert restore_checkpoint(store, "sw", "sw.0", tmp_path / "resumed") == 2
    assert (tmp_path / "resumed" / "model.pt").stat().st_size == 24 * MiB
