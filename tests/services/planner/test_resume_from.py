"""The planner tells each attempt what it resumes from (``TrialMessage.resume_from``):
nothing for a trial that never ran, the newest checkpoint the journal recorded for one
that did, and "unknown" (the agent lists) when the journal has none (issue 23, section 2).
Over the in-memory repositories; the newest checkpoint's query over PostgreSQL: test_ports.py."""

from __future__ import annotations

from typing import Any

from spotsweep.shared.artifacts.checkpoints import folder_prefix
from spotsweep.shared.messages import CheckpointSaved, ResumeFrom, TrialMessage

SPEC: dict[str, Any] = {
    "name": "resume",
    "command": ["python", "train.py", "--lr", "{lr}"],
    "metric": {"name": "loss", "mode": "min"},
    "space": {"lr": [0.1, 0.2, 0.3]},
    "max_concurrent": 1,
    "retries": {"max_failures": 3},
    "resources": {"gpus": 0, "class": "cpu"},
}
SWEEP = "resume-000000a0"


def saved(h: Any, msg: TrialMessage, step: int, trial_id: str | None = None) -> str:
    """Journal a checkpoint commit as the collector does; the folder's name."""
    folder = f"{step:012d}-{step:012x}"
    uri = f"s3://bucket/{folder_prefix(msg.sweep_id, trial_id or msg.trial_id, folder)}"
    with h.deps.unit() as uow:
        uow.trials.journal([CheckpointSaved(sweep_id=msg.sweep_id, trial_id=msg.trial_id, attempt=msg.attempt, step=step,
                                            uri=uri)], {})
    return folder


def retried(h: Any, msg: TrialMessage) -> TrialMessage:
    # Each error its own: the same one again with no step between would not be retried (decide.repeated_failure).
    h.finish(msg, "failed", exit_code=1, error=f"boom {msg.attempt}")
    retry = h.published(1)[0]
    assert (retry.trial_id, retry.attempt) == (msg.trial_id, msg.attempt + 1)
    return retry


def test_a_trial_that_never_ran_is_known_to_have_no_checkpoint(h: Any) -> None:
    h.submit(SPEC, SWEEP)
    assert h.published(1)[0].resume_from == ResumeFrom()


def test_a_retry_resumes_from_the_newest_recorded_checkpoint(h: Any) -> None:
    h.submit(SPEC, SWEEP)
    first = h.published(1)[0]
    h.start(first, run_id="run-1")
    saved(h, first, 10)
    newest = saved(h, first, 20)
    second = retried(h, first)
    assert second.resume_from == ResumeFrom(folder=newest, step=20)
    h.start(second, run_id="run-2")
    third = retried(h, second)  # no new checkpoint from attempt 2: still attempt 1's
    assert third.resume_from == ResumeFrom(folder=newest, step=20)


def test_a_trial_that_ran_without_a_recorded_checkpoint_leaves_the_agent_to_look(h: Any) -> None:
    """The collector may not have journaled a commit yet: "unknown", never "none"."""
    h.submit(SPEC, SWEEP)
    first = h.published(1)[0]
    h.start(first, run_id="run-1")
    assert retried(h, first).resume_from is None


def test_a_checkpoint_outside_the_trials_own_prefix_is_not_a_resume_point(h: Any) -> None:
    h.submit(SPEC, SWEEP)
    first = h.published(1)[0]
    h.start(first, run_id="run-1")
    saved(h, first, 10, trial_id="someone-else")
    assert retried(h, first).resume_from is None
