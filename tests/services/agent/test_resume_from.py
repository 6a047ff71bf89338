"""``TrialMessage.resume_from``: what the planner knows of a trial's checkpoints
spares the agent's start its S3 requests (issue 23, section 2).

The store is the local one wrapped in a counter (tests/support/counting_store.py);
tests/integration/test_resume_from_s3.py runs the same start over moto's S3."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent import uploads
from spotsweep.services.agent.handlers import handle_trial
from spotsweep.services.agent.runner import RunControls, run_trial
from spotsweep.shared import topology
from spotsweep.shared.artifacts.checkpoints import checkpoint_prefix, latest_checkpoint, upload_checkpoint
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.messages import ResumeFrom, TrialMessage, TrialStarted, decode, encode
from tests.services.agent.conftest import Kit
from tests.support.counting_store import CountingStore

SWEEP, TRIAL = "sw", "sw.0"


def message(**fields: Any) -> TrialMessage:
    return TrialMessage(sweep_id=SWEEP, trial_id=TRIAL, attempt=fields.pop("attempt", 1), trial_name="t0", index=0,
                        params={}, argv=["python", "-c", "pass"], metric="loss", **fields)


def commit(store: LocalArtifactStore, tmp_path: Path, step: int, keep: int = 5) -> str:
    """Commit a checkpoint of ``step`` as an agent would; its folder's name."""
    src = tmp_path / f"src-{step}"
    src.mkdir()
    (src / "model.pt").write_text(f"step {step}")
    uri = upload_checkpoint(store, SWEEP, TRIAL, step, src, keep=keep, metrics={"loss": 1.0 / step})
    return uri.rstrip("/").rsplit("/", 1)[-1]


def restore(store: CountingStore, msg: TrialMessage, tmp_path: Path, redelivered: bool = False) -> int | None:
    return uploads.restore(store, msg, tmp_path / "restored", {}, redelivered)


def test_a_first_attempt_starts_without_a_single_store_request(kit: Kit) -> None:
    counting = CountingStore(kit.store)
    at_start: list[int] = []

    def publish(event: Any) -> None:
        if isinstance(event, TrialStarted):
            at_start.append(counting.total())

    for resume_from in (ResumeFrom(), None):  # known fresh; then as an older planner's message
        msg = kit.message("print('{\"loss\": 1}')", resume_from=resume_from)
        counting.calls.clear()
        final = run_trial(msg, counting, publish, kit.config, RunControls())
        assert final is not None and final.outcome == "completed"
    assert at_start == [0, 1]  # not one request; the older message still lists the checkpoint prefix


def test_a_first_attempt_that_checkpoints_nothing_makes_no_request_from_start_to_end(kit: Kit) -> None:
    """Nothing to restore, nothing to prune at its end, no output to keep: a no-op trial costs S3 nothing."""
    counting = CountingStore(kit.store)
    final = run_trial(kit.message("pass", resume_from=ResumeFrom()), counting, lambda e: None, kit.config, RunControls())
    assert final is not None and final.outcome == "completed"
    assert counting.total() == 0


def test_a_resume_fetches_the_recorded_checkpoint_without_a_listing(store: LocalArtifactStore, tmp_path: Path) -> None:
    commit(store, tmp_path, 10)
    folder = commit(store, tmp_path, 20)
    counting = CountingStore(store)
    metrics: dict[str, float] = {}
    step = uploads.restore(counting, message(attempt=2, resume_from=ResumeFrom(folder=folder, step=20)),
                           tmp_path / "restored", metrics)
    assert step == 20 and metrics == {"loss": 0.05}
    assert (tmp_path / "restored" / "model.pt").read_text() == "step 20"
    assert counting.calls["list"] == 0


def test_a_newer_commit_than_the_planner_heard_of_wins(store: LocalArtifactStore, tmp_path: Path) -> None:
    """The journal may lag the commit (the collector journals checkpoints, the planner
    decides the next attempt): ``LATEST`` is followed, still without a listing."""
    older = commit(store, tmp_path, 10)
    commit(store, tmp_path, 30)
    counting = CountingStore(store)
    assert restore(counting, message(attempt=2, resume_from=ResumeFrom(folder=older, step=10)), tmp_path) == 30
    assert counting.calls["list"] == 0


def test_the_recorded_folder_serves_when_latest_is_gone(store: LocalArtifactStore, tmp_path: Path) -> None:
    folder = commit(store, tmp_path, 10)
    store.delete(checkpoint_prefix(SWEEP, TRIAL) + "LATEST")
    counting = CountingStore(store)
    assert restore(counting, message(attempt=2, resume_from=ResumeFrom(folder=folder, step=10)), tmp_path) == 10
    assert counting.calls["list"] == 0


def test_a_missing_recorded_checkpoint_falls_back_to_a_listing(store: LocalArtifactStore, tmp_path: Path) -> None:
    commit(store, tmp_path, 10)
    gone = commit(store, tmp_path, 20)
    prefix = checkpoint_prefix(SWEEP, TRIAL)
    for key in store.list(f"{prefix}{gone}/"):
        store.delete(key)  # pruned, say, by a zombie run's retention
    counting = CountingStore(store)
    assert restore(counting, message(attempt=2, resume_from=ResumeFrom(folder=gone, step=20)), tmp_path) == 10
    assert counting.calls["list"] >= 1
    assert (tmp_path / "restored" / "model.pt").read_text() == "step 10"


def test_a_redelivered_first_attempt_still_finds_the_lost_runs_checkpoint(store: LocalArtifactStore,
                                                                          tmp_path: Path) -> None:
    """The planner said "no checkpoint", but the broker redelivered the message: a run it
    never heard of (its agent died) may have committed one, and it is restored."""
    commit(store, tmp_path, 10)
    counting = CountingStore(store)
    assert restore(counting, message(resume_from=ResumeFrom()), tmp_path, redelivered=True) == 10
    assert counting.calls["list"] >= 1


def test_a_message_from_an_older_planner_lists_as_before(store: LocalArtifactStore, tmp_path: Path) -> None:
    commit(store, tmp_path, 10)
    body = encode(message()).replace(b',"resume_from":null', b"")
    assert b"resume_from" not in body
    old = decode(body)
    assert isinstance(old, TrialMessage) and old.resume_from is None
    counting = CountingStore(store)
    assert restore(counting, old, tmp_path) == 10
    assert counting.calls["list"] >= 1
    assert latest_checkpoint(store, SWEEP, TRIAL) == 10


def test_a_resume_point_must_be_a_checkpoint_folder_of_the_trial() -> None:
    """A folder is a name under the trial's own prefix, never a path; its step is its name's."""
    for bad in ("../../other/checkpoints/000000000010-ab", "000000000010-ab/../x", "latest"):
        with pytest.raises(ValueError, match="folder"):
            ResumeFrom(folder=bad)
    with pytest.raises(ValueError, match="step 5 is not the step of folder"):
        ResumeFrom(folder="000000000010-ab", step=5)


def test_a_draining_agent_republishes_a_redelivered_first_attempt_as_unknown(tmp_path: Path, delivery: Any) -> None:
    """The copy a draining agent republishes is not marked redelivered, so it no longer says
    "no checkpoint" (the lost run may have committed one): the next agent lists."""
    from tests.services.agent.test_handlers import Agent, trial

    agent = Agent(tmp_path)
    back: queue.Queue[Any] = queue.Queue()
    agent.broker.consume(topology.trials_queue("cpu"), lambda d: (back.put(d), d.ack()), prefetch=10)
    agent.deps.agent.preempt.set()
    fresh = trial().model_copy(update={"resume_from": ResumeFrom()})
    for redelivered, expected in ((False, ResumeFrom()), (True, None)):
        handle_trial(delivery(encode(fresh), redelivered=redelivered, message_id="sw.0#1"), agent.deps)
        again = decode(back.get(timeout=2).body)
        assert isinstance(again, TrialMessage) and again.resume_from == expected
