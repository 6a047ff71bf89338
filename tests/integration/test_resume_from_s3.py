"""``resume_from`` on the production store: the agent's runner over moto's S3 server
(the client code MinIO gets), its store wrapped in a request counter. A first attempt
starts without one S3 request; its retry, told the checkpoint the first one committed,
restores it without listing the trial's prefix (issue 23, section 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.messages import CheckpointSaved, ResumeFrom, TrialMessage, TrialStarted
from spotsweep.shared.settings import Settings
from tests.support.counting_store import CountingStore

pytestmark = pytest.mark.integration

# Checkpoints step 10 on a fresh start; on a resume, says which step it found.
SCRIPT = """
import os
from spotsweep import trial
resumed = os.environ.get("SPOTSWEEP_RESUME_STEP")
if resumed is None:
    (trial.checkpoint_dir / "model.pt").write_bytes(b"weights at 10")
    trial.checkpoint_saved(10)
    trial.report(10, loss=0.5)
else:
    assert (trial.checkpoint_dir / "model.pt").read_bytes() == b"weights at 10"
    trial.report(int(resumed) + 1, loss=0.25)
"""


class Events(list):  # type: ignore[type-arg]
    """The runner's publish function: keeps the events and the store's count at the start."""

    def __init__(self, store: CountingStore) -> None:
        super().__init__()
        self.store = store
        self.at_start: dict[str, int] = {}

    def __call__(self, event: Any) -> None:
        if isinstance(event, TrialStarted):
            self.at_start = dict(self.store.calls)
        self.append(event)


def test_a_first_attempt_touches_s3_not_at_all_and_its_retry_does_not_list(s3_env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    settings = Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v for k, v in s3_env.items()})
    store = CountingStore(S3ArtifactStore.from_settings(settings))
    config = RunnerConfig(agent_id="a1", workdir=tmp_path / "work", batch_points=50, batch_seconds=0.05)

    def attempt(n: int, resume_from: ResumeFrom | None) -> Events:
        msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=n, trial_name="t0", index=0, params={},
                           argv=["python", "-c", SCRIPT], metric="loss", resume_from=resume_from)
        store.calls.clear()
        events = Events(store)
        final = run_trial(msg, store, events, config, RunControls())
        assert final is not None and final.outcome == "completed", final
        return events

    first = attempt(1, ResumeFrom())
    assert first.at_start == {}  # not one request before the process started
    [saved] = [e for e in first if isinstance(e, CheckpointSaved)]
    folder = saved.uri.rstrip("/").rsplit("/", 1)[-1]

    second = attempt(2, ResumeFrom(folder=folder, step=saved.step))
    [started] = [e for e in second if isinstance(e, TrialStarted)]
    assert started.resume_step == 10
    assert "list" not in second.at_start and second.at_start["get_file"] == 1
