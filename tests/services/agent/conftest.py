"""Fixtures for the agent's tests: a local artifact store, a runner config, and
a kit to build trial messages and run one attempt with recorded events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.messages import TrialMessage


class Recorder(list):  # type: ignore[type-arg]
    """A publish function that keeps what it was given."""

    def __call__(self, event: Any) -> None:
        self.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self if isinstance(e, kind)]


@dataclass
class Kit:
    store: LocalArtifactStore
    config: RunnerConfig

    def message(self, script: str, attempt: int = 1, **fields: Any) -> TrialMessage:
        return TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=attempt, trial_name="t0", index=0, params={},
                            argv=["python", "-c", script], metric="loss", **fields)

    def run(self, msg: TrialMessage, control: RunControls | None = None, **kw: Any) -> tuple[Any, Recorder]:
        events = Recorder()
        return run_trial(msg, self.store, events, self.config, control or RunControls(), **kw), events


@pytest.fixture()
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture()
def config(tmp_path: Path) -> RunnerConfig:
    return RunnerConfig(agent_id="test-agent", workdir=tmp_path / "work", batch_points=50, batch_seconds=0.05)


@pytest.fixture()
def kit(store: LocalArtifactStore, config: RunnerConfig) -> Kit:
    return Kit(store, config)
