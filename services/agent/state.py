"""What one agent process keeps for its whole life, across broker connections.

:class:`Agent` is the one state object: the store, the runner's config, the
slots, node health, the agent's own signals (preempt, hard stop), the sweeps
cancelled and runs stopped by the planner, and the lost runs still to
report. Per broker connection there is a :class:`~.handlers.Connection`;
per run, :class:`~.stop_policy.RunControls` made by :meth:`Agent.controls`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spotsweep.services.agent.attempts import Attempts
from spotsweep.services.agent.capacity import Ledger, detect
from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.health import Health
from spotsweep.services.agent.idle import Idle
from spotsweep.services.agent.supervise import RunnerConfig
from spotsweep.services.agent.workspace import remove_own, remove_stale
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.messages import TrialLost

MAX_STOPS = 10_000


class Slots:
    """Slot ids handed to trials; each slot is one GPU when the node has GPUs."""

    def __init__(self, n: int, gpus: list[str] | None) -> None:
        self.count = n
        self.gpus = len(gpus[0].split(",")) if gpus else 0  # GPUs each slot gets (a group "0,1" is two)
        self._workdirs: set[Path] = set()
        self._free: queue.Queue[tuple[int, str | None]] = queue.Queue()
        for i in range(n):
            # More slots than GPUs share them round-robin (small models); never
            # leave CUDA_VISIBLE_DEVICES unset on a GPU node, or a trial sees all.
            self._free.put((i, gpus[i % len(gpus)] if gpus else None))

    @property
    def busy(self) -> int:
        """Slots running a trial now (the ``spotsweep_agent_slots_busy`` metric)."""
        return self.count - self._free.qsize()

    @contextmanager
    def take(self) -> Iterator[tuple[int, str | None]]:
        slot = self._free.get()
        try:
            yield slot
        finally:
            self._free.put(slot)

    def use_workdir(self, parent: Path) -> None:
        """Runs make their trees under ``parent``: clear what agents killed outright left there (once)."""
        if parent not in self._workdirs:
            self._workdirs.add(parent)
            remove_stale(parent)

    def remove_workspaces(self) -> None:
        """Delete what this agent's runs left (the agent is exiting: a run stopped hard may not have)."""
        for parent in list(self._workdirs):
            remove_own(parent)


@dataclass
class Agent:
    """The agent's state across connections (see the module's docstring)."""

    store: ArtifactStore
    config: RunnerConfig
    slots: Slots
    health: Health = field(default_factory=Health)
    grace: float = 90.0  # from SIGTERM to SIGKILL of a trial on preemption
    preempt: threading.Event = field(default_factory=threading.Event)  # draining: the node is going away
    kill: threading.Event = field(default_factory=threading.Event)  # hard stop
    # Lost runs to report once connected again: the event, and the reason its
    # connection ended (known for certain only once that connection's cleanup ran).
    notices: list[tuple[TrialLost, Callable[[], str]]] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)  # sweep ids
    stops: dict[str, str] = field(default_factory=dict)  # run id -> the planner's reason to stop it
    lock: threading.Lock = field(default_factory=threading.Lock)
    idle: Idle = field(default_factory=Idle)  # how long no trial ran (--exit-when-idle)
    attempts: Attempts = field(default_factory=Attempts)  # run or running here: a second copy is dropped
    # The cpus and memory its running trials reserved, against its capacity (--cpus, --memory): capacity.py.
    ledger: Ledger = field(default_factory=lambda: Ledger(detect(None, None, "gpu")))

    def is_cancelled(self, sweep_id: str) -> bool:
        with self.lock:
            return sweep_id in self.cancelled

    def stop_reason(self, run_id: str) -> str | None:
        with self.lock:
            return self.stops.get(run_id)

    def cancel(self, sweep_id: str) -> None:
        with self.lock:
            self.cancelled.add(sweep_id)

    def stop(self, run_id: str, reason: str) -> None:
        with self.lock:
            self.stops[run_id] = reason
            while len(self.stops) > MAX_STOPS:  # run ids are never reused: forget the oldest
                del self.stops[next(iter(self.stops))]

    def controls(self, sweep_id: str, lost: threading.Event) -> RunControls:
        """The controls of one run of sweep ``sweep_id`` on a connection whose end sets ``lost``."""
        return RunControls(preempt=self.preempt, kill=self.kill, lost=lost, grace=self.grace,
                           cancelled=lambda: self.is_cancelled(sweep_id), stopped=self.stop_reason)

    def note_lost(self, notice: TrialLost, reason: Callable[[], str]) -> None:
        with self.lock:
            self.notices.append((notice, reason))

    def take_notices(self) -> list[tuple[TrialLost, Callable[[], str]]]:
        with self.lock:
            notices, self.notices = self.notices, []
        return notices

    def return_notices(self, notices: list[tuple[TrialLost, Callable[[], str]]]) -> None:
        """Put notices that could not be sent back, first in line."""
        with self.lock:
            self.notices[:0] = notices
