"""Who ran what, when: a sweep's runs on its agents' slots, from the event journal.

The planner journals every run's start (``trial.started``: agent, run id,
time) and its end (``trial.finished`` with the outcome, or ``trial.lost``)
in ``trial_events`` (the view ``run_events``). :func:`runs` pairs them into one :class:`Run` per
(trial, attempt, run id): a run whose end has not come is still running. An
agent that vanishes (``kill -9``, a node gone) journals no end: the broker
hands the attempt out again and the next start says ``redelivered``, so a
run with no end that such a start follows ended then, ``lost`` (so does one
followed by a later attempt's start, or whose trial has ended). Early stopping
stops a run and the agent then sends no end: a trial's last run with no end
whose trial ended ``pruned`` ended when the trial did, ``pruned``. An end
whose start the journal lacks (only rows from older versions) starts
``duration`` seconds before it.

The journal does not say which of an agent's slots a run held, so
:func:`lanes` packs each agent's runs into the fewest lanes in which no two
overlap (interval partitioning, first free lane): an agent with N slots
never shows more than N lanes, and a slot's runs read left to right.

Pure functions over the rows :func:`.queries.runs` returns.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

ENDS = {"trial.finished", "trial.lost"}
TERMINAL = {"completed", "failed", "cancelled", "pruned"}


@dataclass(frozen=True)
class Run:
    trial_id: str
    trial_name: str
    attempt: int
    run_id: str
    agent: str
    start: datetime
    end: datetime | None  # None: no end yet
    outcome: str  # completed, failed, cancelled, preempted, pruned, lost, or running (no end yet)
    staging: float = 0.0  # seconds staging the trial's inputs before ``start``
    note: str = ""  # why a lost run was lost


Key = tuple[str, int, str]  # (trial id, attempt, run id)


def runs(rows: Iterable[Mapping[str, Any]]) -> list[Run]:
    """One run per (trial, attempt, run id) that has a start or an end, by
    start; a run with no end that a later start superseded ends ``lost``."""
    starts: dict[Key, Mapping[str, Any]] = {}
    ends: dict[Key, Mapping[str, Any]] = {}
    for row in rows:
        key = (row["trial_id"], int(row["attempt"] or 0), row.get("run_id") or "")
        if row["kind"] == "trial.started":
            starts.setdefault(key, row)
        elif row["kind"] in ENDS and (key not in ends or row["time"] < ends[key]["time"]):
            ends[key] = row  # the first end counts, as the planner decides it
    out = []
    for key in starts.keys() | ends.keys():
        start, end = starts.get(key), ends.get(key)
        run = _begun(key, start, end)
        out.append(_ended(run, end) if end is not None else _vanished(run, starts.values(), start or {}))
    out.sort(key=lambda r: (r.start, r.trial_id, r.attempt, r.run_id))
    return out


def _begun(key: Key, start: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> Run:
    """The run ``key`` as it started, from its start, else its end (whose start the journal lacks: it
    starts ``duration`` seconds before the end)."""
    some = start or end
    assert some is not None
    begun = start["time"] if start is not None else some["time"] - timedelta(seconds=float(some.get("duration") or 0.0))
    agent = (start or {}).get("agent") or (end or {}).get("agent") or "?"
    return Run(key[0], some["trial_name"], key[1], key[2], agent, begun, None, "running",
               float((start or {}).get("staging") or 0.0))


def _ended(run: Run, end: Mapping[str, Any]) -> Run:
    """``run`` ended by its journalled end: an outcome, or a loss with its reason."""
    if end["kind"] != "trial.lost":
        return replace(run, end=end["time"], outcome=end.get("outcome") or "ended")
    why = end.get("reason")
    return replace(run, end=end["time"], outcome="lost", note=f"lost on {run.agent}" + (f": {why}" if why else ""))


def _vanished(run: Run, starts: Iterable[Mapping[str, Any]], some: Mapping[str, Any]) -> Run:
    """``run`` with no end: lost when a start superseded it (a redelivered
    one of its attempt, or any of a later attempt) or its trial has ended;
    pruned when it is its pruned trial's last run (early stopping stopped it)."""
    later = [s["time"] for s in starts if s["trial_id"] == run.trial_id and s["time"] > run.start
             and (int(s["attempt"] or 0) > run.attempt or (int(s["attempt"] or 0) == run.attempt and s.get("redelivered")))]
    if later:
        return replace(run, end=min(later), outcome="lost", note=f"lost: agent {run.agent} vanished")
    if some.get("trial_state") in TERMINAL and some.get("trial_finished") is not None:
        last = not any(s["trial_id"] == run.trial_id and s["time"] > run.start for s in starts)
        if some["trial_state"] == "pruned" and last:
            return replace(run, end=max(some["trial_finished"], run.start), outcome="pruned",
                           note="pruned: early stopping stopped the run")
        return replace(run, end=max(some["trial_finished"], run.start), outcome="lost",
                       note=f"lost: agent {run.agent} sent no end before the trial ended {some['trial_state']}")
    return run


def lanes(items: list[Run], now: datetime) -> list[int]:
    """Each run's lane within its agent (``items`` by start): the first lane
    free at its start (a run with no end holds its lane until ``now``)."""
    free: dict[str, list[tuple[datetime, int]]] = {}  # agent -> heap of (busy until, lane)
    count: dict[str, int] = {}
    out = []
    for run in items:
        heap = free.setdefault(run.agent, [])
        if heap and heap[0][0] <= run.start - timedelta(seconds=run.staging):
            _, lane = heapq.heappop(heap)
        else:
            lane = count.get(run.agent, 0)
            count[run.agent] = lane + 1
        heapq.heappush(heap, (run.end if run.end is not None else max(now, run.start), lane))
        out.append(lane)
    return out


def as_json(items: list[Run], now: datetime, limit: int) -> dict[str, Any]:
    """``GET /api/sweeps/<id>/timeline``'s body: the lanes (agent and slot
    lane, by agent) and the latest ``limit`` runs, each naming its lane."""
    placed = lanes(items, now)
    keys = sorted({(r.agent, lane) for r, lane in zip(items, placed)})
    index = {k: i for i, k in enumerate(keys)}
    shown = list(zip(items, placed))[-limit:]
    return {
        "now": now,
        "lanes": [{"agent": agent, "slot": lane} for agent, lane in keys],
        "runs": [{"lane": index[(r.agent, lane)], "trial_id": r.trial_id, "trial_name": r.trial_name,
                  "attempt": r.attempt, "agent": r.agent, "start": r.start, "end": r.end, "outcome": r.outcome,
                  "staging": r.staging, "note": r.note}
                 for r, lane in shown],
        "total": len(items),
    }
