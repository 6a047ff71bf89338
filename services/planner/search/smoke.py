"""The smoke stage: a few short trials before the sweep proper (docs/search.md, ``smoke``).

:func:`smoke_stage` is the whole decision, a function of the smoke trials'
records, so a restarted planner decides the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spotsweep.services.planner.search.history import TrialRecord
from spotsweep.shared.spec_search import Smoke
from spotsweep.shared.states import TrialState


@dataclass(frozen=True)
class SmokeDecision:
    hold: bool  # True: launch no regular trial yet
    launch: tuple[int, ...] = ()  # smoke trial numbers to launch now (not launched before)
    error: str | None = None  # set: stop the sweep with this error
    passed: bool = False

    @property
    def failed(self) -> bool:
        return self.error is not None


def smoke_stage(smoke: Smoke | None, trials: Sequence[TrialRecord], objectives: Sequence[str]) -> SmokeDecision:
    """What the smoke stage allows now. ``trials``: the smoke trials launched so
    far, ``index`` being the smoke number; ``objectives``: the metric names."""
    if smoke is None:
        return SmokeDecision(hold=False, passed=True)
    for record in sorted(trials, key=lambda r: r.index):
        why = _failure(record, objectives)
        if why is not None:
            return SmokeDecision(hold=True, error=f"smoke trial {record.index} {why}; the sweep stopped before its other trials")
    launched = {r.index for r in trials}
    missing = tuple(k for k in range(smoke.trials) if k not in launched)
    done = [r for r in trials if r.state == TrialState.COMPLETED]
    if not missing and len(done) >= smoke.trials:
        return SmokeDecision(hold=False, passed=True)
    return SmokeDecision(hold=True, launch=missing)


def _failure(record: TrialRecord, objectives: Sequence[str]) -> str | None:
    error = f": {record.error.strip().splitlines()[-1]}" if record.error and record.error.strip() else ""
    if record.state == TrialState.FAILED or record.failures > 0:
        return f"failed{error}"
    if record.state in (TrialState.CANCELLED, TrialState.PRUNED):
        return f"was {record.state.value}{error}"
    if record.state == TrialState.COMPLETED and record.values is None:
        return f"completed without reporting {', '.join(objectives)}"
    if record.state == TrialState.COMPLETED and record.values is not None:
        bad = [f"{name} = {value}" for name, value in zip(objectives, record.values) if not math.isfinite(value)]
        if bad:
            return f"completed with {', '.join(bad)}: not a finite number (did the run diverge?)"
    return None
