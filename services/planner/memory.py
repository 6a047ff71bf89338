"""The planner's repositories in memory (:mod:`.ports`): planner logic tested without PostgreSQL.

Dictionaries of rows, written as the SQL of :mod:`.store` writes them (the
contract suite, tests/services/planner/test_ports.py, checks both alike).
There are no transactions: a test that needs a rollback uses PostgreSQL.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import TrialUpdate, TrialView
from spotsweep.services.planner.lineage import Segment
from spotsweep.services.planner.outcome import Outcomes
from spotsweep.services.planner.ports import History
from spotsweep.services.planner.search import Usage, trial_steps
from spotsweep.services.planner.searching import Flying, Totals, record_from_row, split, usage_of
from spotsweep.services.planner.unit import UnitOfWork
from spotsweep.services.planner.untrusted import FLAGS, WARNINGS, pg_text
from spotsweep.shared.db import Row
from spotsweep.shared.messages import CheckpointSaved, Envelope, json_safe
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import IN_FLIGHT, TrialState

DAY = 86400.0  # how long a cancel waits for its sweep (store's ``interval '1 day'``)


class MemoryDb:
    """The ``sweeps`` and ``trials`` tables, by id."""

    def __init__(self) -> None:
        self.sweeps: dict[str, dict[str, Any]] = {}
        self.trials: dict[str, dict[str, Any]] = {}
        self.events: dict[str, Envelope] = {}  # the journal, by message id
        self.early_cancels: dict[str, float] = {}  # sweep id -> when its cancel came
        self.segments: dict[tuple[str, int], dict[str, Any]] = {}  # PBT's lineage, by trial and segment


class _Tables:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db


class MemorySweeps(_Tables):
    def insert(self, sweep_id: str, spec: dict[str, Any], name: str, total: int, priority: int) -> bool:
        if sweep_id in self.db.sweeps:
            return False
        self.db.sweeps[sweep_id] = {
            "sweep_id": sweep_id, "name": name, "spec": copy.deepcopy(spec), "state": "running", "error": None,
            "total_trials": total, "next_index": 0, "priority": priority, "created_at": time.time(),
            "finished_at": None, "search_attrs": None, "note": None, "spec_version": 0}
        return True

    def insert_rejected(self, sweep_id: str, name: str, error: str) -> None:
        if self.insert(sweep_id, {}, name, 0, 0):
            self.db.sweeps[sweep_id].update(spec=None, state="rejected", error=pg_text(error), finished_at=time.time())

    def fill_tombstone(self, sweep_id: str, spec: dict[str, Any], name: str, total: int) -> None:
        row = self.db.sweeps[sweep_id]
        if row["spec"] is None and row["state"] == "cancelled":
            row.update(spec=copy.deepcopy(spec), name=name, total_trials=total)

    def extend(self, sweep_id: str, spec: dict[str, Any], total: int) -> None:
        row = self.db.sweeps[sweep_id]
        row.update(spec=copy.deepcopy(spec), total_trials=total, spec_version=row["spec_version"] + 1, note=None,
                   state="running", finished_at=None)

    def cancel(self, sweep_id: str) -> int | None:
        if sweep_id not in self.db.sweeps:
            return None
        self.finish(sweep_id, "cancelled")
        return self._end_trials(sweep_id, "cancelled by user")

    def remember_early_cancel(self, sweep_id: str) -> bool:
        now = time.time()
        kept = self.db.early_cancels
        for old in [s for s, at in kept.items() if at < now - DAY]:
            del kept[old]
        if sweep_id in kept or len(kept) >= store.EARLY_CANCELS:
            return False
        kept[sweep_id] = now
        return True

    def take_early_cancel(self, sweep_id: str) -> bool:
        at = self.db.early_cancels.pop(sweep_id, None)
        return at is not None and at >= time.time() - DAY

    def lock(self, sweep_id: str) -> Row | None:
        row = self.db.sweeps.get(sweep_id)
        return None if row is None else {**copy.deepcopy({k: v for k, v in row.items() if k != "spec"}),
                                         "has_spec": row["spec"] is not None}

    def cap(self, sweep_id: str, total: int, note: str) -> None:
        self.db.sweeps[sweep_id].update(total_trials=total, note=note)

    def finish(self, sweep_id: str, state: str = "completed", error: str | None = None) -> None:
        row = self.db.sweeps[sweep_id]
        if row["state"] == "running":
            row.update(state=state, finished_at=time.time(), error=row["error"] if error is None else pg_text(error))

    def set_study_attrs(self, sweep_id: str, attrs: dict[str, Any]) -> None:
        self.db.sweeps[sweep_id]["search_attrs"] = copy.deepcopy(attrs)

    def fail(self, sweep_id: str, error: str) -> None:
        error = pg_text(error)
        self.finish(sweep_id, "failed", error)
        self._end_trials(sweep_id, "the sweep failed: " + error)

    def spec(self, sweep_id: str) -> tuple[dict[str, Any], int] | None:
        row = self.db.sweeps.get(sweep_id)
        return None if row is None or row["spec"] is None else (copy.deepcopy(row["spec"]), int(row["spec_version"]))

    def _end_trials(self, sweep_id: str, error: str) -> int:
        """Cancel the sweep's trials not yet ended (in flight or paused), with ``error``; how many."""
        ending = [row for row in self.db.trials.values()
                  if row["sweep_id"] == sweep_id and TrialState(row["state"]) in (*IN_FLIGHT, TrialState.PAUSED)]
        for row in ending:
            row.update(state="cancelled", finished_at=time.time(), error=error)
        return len(ending)


class MemoryTrials(_Tables):
    def insert(self, sweep_id: str, trials: list[store.NewTrial], advance: bool = True) -> None:
        for index, name, params, attrs in trials:
            trial_id = store.trial_id_for(sweep_id, index)
            self.db.trials.setdefault(trial_id, _new_row(trial_id, sweep_id, index, name, params, attrs))
        if trials and advance:
            self.db.sweeps[sweep_id]["next_index"] = trials[-1][0] + 1

    def get(self, trial_ids: list[str]) -> dict[str, tuple[Row, TrialView]]:
        rows = {t: copy.deepcopy(self.db.trials[t]) for t in sorted(set(trial_ids)) if t in self.db.trials}
        return {t: (row, store.view_of(row)) for t, row in rows.items()}

    def update(self, trial_id: str, u: TrialUpdate) -> None:
        row = self.db.trials.get(trial_id)
        if row is None:
            return
        now = time.time()
        error = None if u.state == TrialState.COMPLETED else (row["error"] if u.error is None else pg_text(u.error))
        new, _ = store.updated(row, u)
        row.update(new, error=error, agent=u.agent if u.agent is not None else row["agent"])
        if u.started:
            row["started_at"] = row["started_at"] or now
            row["run_started_at"] = now
        if u.finished:
            row["finished_at"] = now
        row["flags"] = _merged(row["flags"], u.flags, FLAGS)
        row["warnings"] = _merged(row["warnings"], u.warnings, WARNINGS)

    def merge_curve(self, trial_id: str, points: list[tuple[int, float]]) -> None:
        row = self.db.trials[trial_id]
        row["curve"] = {**row["curve"], **json_safe({str(step): value for step, value in points})}
        row["last_step"] = max([row["last_step"], *(step for step, _ in points)])

    def in_flight(self, sweep_id: str) -> tuple[int, int]:
        states = [TrialState(r["state"]) for r in self.db.trials.values() if r["sweep_id"] == sweep_id]
        busy = [s for s in states if s in IN_FLIGHT]
        return len(busy), sum(1 for s in busy if s != TrialState.RUNNING)

    def history(self, sweep_id: str, spec: SweepSpec, *, steps: list[int] | None = None, full_curve: str | None = None,
                pruned_curves: bool = False) -> History:
        keep = {str(s) for s in steps or ()}
        rows = sorted((r for r in self.db.trials.values() if r["sweep_id"] == sweep_id), key=lambda r: r["idx"])
        out = []
        for r in rows:
            whole = (pruned_curves and r["state"] == "pruned") or r["trial_id"] == full_curve
            curve = r["curve"] if whole else {k: v for k, v in r["curve"].items() if k in keep}
            out.append((r["idx"], record_from_row({**r, "curve": curve}, spec)))
        return split(out)

    def outcomes(self, sweep_id: str) -> Outcomes:
        rows = [r for r in self.db.trials.values() if r["sweep_id"] == sweep_id and r["idx"] >= 0]
        failed = sorted((r["idx"], r["error"]) for r in rows if r["state"] == "failed")
        return Outcomes(dict(Counter(r["state"] for r in rows)), failed[0][1] if failed else None)

    def usage(self, sweep_id: str, spec: SweepSpec, budget_param: str | None = None,
              ended: tuple[str, float | None] | None = None) -> Usage:
        rows = [r for r in self.db.trials.values() if r["sweep_id"] == sweep_id]
        pbt = spec.strategy.inherits_checkpoints  # PBT's exploits copied budget units rather than trained them
        exploits = {r["trial_id"]: self._exploits(r["trial_id"]) if pbt else [] for r in rows}
        now = time.time()
        capped = spec.budget is not None and spec.budget.wall_time
        return usage_of(spec, budget_param, ended,
                        _totals(rows, budget_param, exploits, _running_seconds(rows, now) if capped else 0.0),
                        [_flying(r, budget_param, exploits[r["trial_id"]], now)
                         for r in rows if TrialState(r["state"]) in IN_FLIGHT])

    def _exploits(self, trial_id: str) -> list[tuple[float, float]]:
        """(budget it exploited at, units copied) of each of the trial's exploits (:data:`.searching.EXPLOITS`)."""
        return [(float(r["start_step"]), float(r["from_step"] - r["start_step"]))
                for (t, _), r in sorted(self.db.segments.items()) if t == trial_id and r["from_step"] is not None]

    def journal(self, events: Sequence[Envelope], bodies: Mapping[str, bytes]) -> None:
        for e in events:
            self.db.events.setdefault(e.message_id, e)

    def end_segment(self, trial_id: str, sweep_id: str, end_step: int, params: dict[str, Any], value: float) -> int:
        if not any(t == trial_id for t, _ in self.db.segments):
            self.add_segment(Segment(trial_id, 1, sweep_id, 1, 0, end_step, params))
        last = max(n for t, n in self.db.segments if t == trial_id)
        self.db.segments[trial_id, last]["value"] = value
        return last

    def add_segment(self, segment: Segment) -> None:
        row = {**segment._asdict(), "params": copy.deepcopy(segment.params), "copied_at": None, "copy_note": None,
               "value": None, "decided_at": time.time()}
        self.db.segments.setdefault((segment.trial_id, segment.segment), row)

    def copies_to_do(self, sweep_id: str | None) -> list[Row]:
        def keep_all(s: str) -> bool:
            return bool(((self.db.sweeps[s]["spec"] or {}).get("checkpoints") or {}).get("keep") == "all")

        return [{k: r[k] for k in ("trial_id", "segment", "sweep_id", "from_trial_id")} | {"keep_all": keep_all(r["sweep_id"])}
                for _, r in sorted(self.db.segments.items())
                if r["from_trial_id"] is not None and r["copied_at"] is None
                and self.db.trials[r["trial_id"]]["state"] == "pending" and sweep_id in (None, r["sweep_id"])]

    def mark_copied(self, trial_id: str, segment: int, step: int | None, note: str | None) -> None:
        row = self.db.segments[trial_id, segment]
        if row["copied_at"] is None:
            row.update(copied_at=time.time(), from_step=step, copy_note=note)

    def pending(self, sweep_id: str | None) -> list[Row]:
        copying = {t for (t, _), s in self.db.segments.items() if s["from_trial_id"] is not None and s["copied_at"] is None}
        rows = [{**copy.deepcopy(r), "spec_version": self.db.sweeps[r["sweep_id"]]["spec_version"]}
                for r in sorted(self.db.trials.values(), key=lambda r: (r["sweep_id"], r["idx"]))
                if r["state"] == "pending" and sweep_id in (None, r["sweep_id"]) and r["trial_id"] not in copying]
        return rows[:store.PENDING_PAGE]

    def mark_queued(self, trial_ids: list[str]) -> None:
        for trial_id in trial_ids:
            if self.db.trials[trial_id]["state"] == "pending":
                self.db.trials[trial_id]["state"] = "queued"

    def newest_checkpoints(self, trial_ids: list[str]) -> list[Row]:
        newest: dict[str, CheckpointSaved] = {}
        for e in self.db.events.values():  # in the order journaled: the later of two at one step wins
            if isinstance(e, CheckpointSaved) and e.trial_id in trial_ids and (
                    e.trial_id not in newest or e.step >= newest[e.trial_id].step):
                newest[e.trial_id] = e
        return [{"trial_id": t, "sweep_id": e.sweep_id, "uri": e.uri} for t, e in sorted(newest.items())]


def _budget(row: dict[str, Any], param: str | None) -> float | None:
    """The trial's budget parameter, when numeric."""
    value = row["params"].get(param or "")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _totals(rows: list[dict[str, Any]], param: str | None, exploits: dict[str, list[tuple[float, float]]],
            elapsed: float) -> Totals:
    """What :func:`.searching.usage`'s first query adds up, over the rows."""
    regular = [r for r in rows if r["idx"] >= 0]
    reached = [(r["run_seconds"], b) for r in regular if r["state"] in ("completed", "pruned")
               and (b := _budget(r, param)) is not None]
    steps = 0.0
    for r in rows:
        if TrialState(r["state"]) not in IN_FLIGHT:
            budget, started = _budget(r, param), r["started_at"] is not None
            trained = trial_steps(budget, 0, r["last_step"], in_flight=False, started=started)[0]
            steps += trained - (sum(u for _, u in exploits[r["trial_id"]]) if budget is not None and started else 0.0)
    return Totals(len(regular), sum(r["run_seconds"] for r in rows),
                  [r["run_seconds"] for r in regular if r["state"] == "completed"], reached, elapsed, steps,
                  [float(max(0, r["last_step"])) for r in regular if r["state"] == "completed"])


def _flying(row: dict[str, Any], param: str | None, exploits: list[tuple[float, float]], now: float) -> Flying:
    """A trial in flight, as :func:`.searching.usage`'s second query reads it."""
    ran = now - row["run_started_at"] if row["state"] == "running" and row["run_started_at"] else 0.0
    return Flying(row["trial_id"], row["run_seconds"], {int(k): v for k, v in row["rungs"].items()},
                  _budget(row, param), ran, float(row["last_step"]), exploits)


def _running_seconds(rows: list[dict[str, Any]], now: float) -> float:
    """The length of the union of the trials' lifetimes (:func:`.searching._running_seconds`)."""
    spans = sorted((r["created_at"], now if TrialState(r["state"]) in IN_FLIGHT
                    else max(r["created_at"], r["finished_at"] or r["created_at"])) for r in rows)
    total, reach = 0.0, None
    for start, end in spans:
        total += max(0.0, end - max(start, reach if reach is not None else start))
        reach = end if reach is None else max(reach, end)
    return total


def _new_row(trial_id: str, sweep_id: str, index: int, name: str, params: dict[str, Any],
             attrs: dict[str, Any]) -> dict[str, Any]:
    return {"trial_id": trial_id, "sweep_id": sweep_id, "idx": index, "trial_name": name, "params": copy.deepcopy(params),
            "state": "pending", "attempt": 1, "failures": 0, "preemptions": 0, "metrics": {}, "error": None,
            "agent": None, "losses": 0, "run_seconds": 0.0, "run_id": None, "rungs": {}, "curve": {}, "last_step": 0,
            "search_attrs": copy.deepcopy(attrs), "flags": [], "warnings": [], "created_at": time.time(),
            "started_at": None, "finished_at": None, "run_started_at": None}


def _merged(old: list[str], new: tuple[str, ...] | None, most: int) -> list[str]:
    """The SQL's array merge: old items first, each once, at most ``most``."""
    return old if new is None else list(dict.fromkeys([*old, *new]))[:most]


@contextmanager
def memory_unit(db: MemoryDb) -> Iterator[UnitOfWork]:
    """A unit of work over ``db`` (no rollback: a failure leaves what was written)."""
    uow = UnitOfWork(MemorySweeps(db), MemoryTrials(db))
    yield uow
    uow.flush()
