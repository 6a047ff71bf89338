"""Each sweep's search history, kept in the planner between events (docs/architecture.md, "Search history").

Reading every trial at each decision made a sweep's events cost more the more
trials had finished. Ended trials never change (:mod:`spotsweep.shared.states`),
so their records are kept and a read fetches only the trials in flight at the
last read, those launched since (trials are inserted under the sweep's row
lock, which every read holds too), the smoke trials, and a step of the curve
not asked for before. A transaction that fails drops its sweeps' entries
(:mod:`.unit`); what another planner changed is in flight or new, so read again.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from spotsweep.services.planner.search import TrialRecord
from spotsweep.services.planner.searching import COLUMNS, curve_args, record_from_row
from spotsweep.shared.db import Conn
from spotsweep.shared.spec import SweepSpec

SWEEPS = 64  # histories kept at once, least recently used dropped first

_CHANGED = (f"SELECT {COLUMNS} FROM trials WHERE sweep_id = %(sweep)s AND (idx = ANY(%(open)s) OR idx > %(top)s OR idx < 0)"
            " ORDER BY idx")
_ALL = f"SELECT {COLUMNS} FROM trials WHERE sweep_id = %(sweep)s ORDER BY idx"
# One step's point of every ended regular trial, as a float ("NaN" and "Infinity" are stored as strings float8 reads).
_POINT = ("SELECT idx, (curve ->> %(step)s)::float8 AS value FROM trials WHERE sweep_id = %(sweep)s AND idx >= 0"
          " AND state IN ('completed', 'pruned', 'failed', 'cancelled') AND curve ? %(step)s")


@dataclass
class _Entry:
    """One sweep's history, for one shape of curve (see :meth:`HistoryCache.read`)."""

    ended: dict[int, TrialRecord] = field(default_factory=dict)  # regular trials ended, by idx
    order: list[int] = field(default_factory=list)  # ``ended``'s keys, sorted
    records: list[TrialRecord] = field(default_factory=list)  # ``ended``'s values in that order
    open: list[int] = field(default_factory=list)  # idx of the regular trials in flight at the last read
    top: int = -1  # highest idx read
    steps: frozenset[str] = frozenset()  # curve points every ended record holds
    fresh: bool = True  # nothing read yet

    def end(self, idx: int, record: TrialRecord) -> None:
        if idx not in self.ended:
            at = bisect.bisect(self.order, idx)
            self.order.insert(at, idx)
            self.records.insert(at, record)
        else:
            self.records[bisect.bisect_left(self.order, idx)] = record
        self.ended[idx] = record

    def add_points(self, idx: int, points: dict[int, float]) -> None:
        old = self.ended.get(idx)
        if old is not None:
            self.end(idx, replace(old, curve={**old.curve, **points}))

    def merged(self, now: list[tuple[int, TrialRecord]]) -> list[TrialRecord]:
        """The ended records with those of trials in flight (``now``, by idx ascending) in idx order."""
        out = list(self.records)
        for idx, record in reversed(now):  # from the highest: earlier positions stay valid
            out.insert(bisect.bisect(self.order, idx), record)
        return out


class HistoryCache:
    """The search histories of the sweeps the planner decides about, by sweep."""

    def __init__(self, sweeps: int = SWEEPS) -> None:
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._sweeps = sweeps

    def drop(self, sweep_id: str) -> None:
        """Forget a sweep's history (its next read reads it all)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == sweep_id]:
                del self._entries[key]

    def read(self, conn: Conn, sweep_id: str, spec: SweepSpec, *, steps: list[int] | None = None,
             full_curve: str | None = None, pruned_curves: bool = False) -> tuple[list[TrialRecord], list[TrialRecord]]:
        """What :func:`.searching.history` returns, for the same arguments;
        with ``steps``, ended trials' curves may hold more points than asked
        (those of earlier reads: early stopping reads only the steps it asks)."""
        kind = f"steps={bool(steps)} pruned={pruned_curves}"  # one entry per shape of curve asked for
        with self._lock:
            entry = self._entries.pop((sweep_id, kind), None) or _Entry()
        want = entry.steps | {str(s) for s in steps or ()}
        if want != entry.steps and entry.ended:
            self._add_points(conn, sweep_id, entry, want - entry.steps)
        entry.steps = want
        args = {**curve_args(sweep_id, want, full_curve, pruned_curves), "open": entry.open, "top": entry.top}
        rows = conn.execute(_ALL if entry.fresh else _CHANGED, args).fetchall()
        entry.fresh, entry.open = False, []
        now: list[tuple[int, TrialRecord]] = []
        for r in rows:
            idx, record = r["idx"], record_from_row(r, spec)
            entry.top = max(entry.top, idx)
            if idx < 0:
                now.append((idx, record))  # smoke trials: few, always read
            elif record.state.is_terminal:
                entry.end(idx, record)
            else:
                now.append((idx, record))
                entry.open.append(idx)
        with self._lock:
            self._entries[(sweep_id, kind)] = entry
            while len(self._entries) > self._sweeps:
                self._entries.popitem(last=False)
        smoke = [record for idx, record in now if idx < 0]
        return entry.merged([(idx, record) for idx, record in now if idx >= 0]), smoke

    @staticmethod
    def _add_points(conn: Conn, sweep_id: str, entry: _Entry, steps: frozenset[str]) -> None:
        """The points at ``steps`` of every ended record, read once per new step."""
        for step in sorted(steps):
            for r in conn.execute(_POINT, {"sweep": sweep_id, "step": step}).fetchall():
                entry.add_points(r["idx"], {int(step): float(r["value"])})
