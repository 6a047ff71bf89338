"""The planner's repositories: what deciding trial events reads and writes of sweeps and trials.

PostgreSQL's adapter (:class:`PgSweeps`, :class:`PgTrials`) is the SQL of
:mod:`.store`, :mod:`.searching` and :mod:`.lineage`; :mod:`.memory`'s tests
planner logic without PostgreSQL. One contract suite
(tests/services/planner/test_ports.py) runs over both. Rows are dictionaries
with the columns the decisions read (:data:`.store._DECIDED` for trials).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from spotsweep.services.planner import lineage, store
from spotsweep.services.planner.decide import TrialUpdate, TrialView
from spotsweep.services.planner.lineage import Segment
from spotsweep.services.planner.outcome import Outcomes
from spotsweep.services.planner.search import TrialRecord, Usage
from spotsweep.services.planner.searching import history, usage
from spotsweep.shared.db import Conn, Row
from spotsweep.shared.db.journal import journal
from spotsweep.shared.messages import Envelope
from spotsweep.shared.spec import SweepSpec

History = tuple[list[TrialRecord], list[TrialRecord]]
P = ParamSpec("P")
R = TypeVar("R")


class SweepRepository(Protocol):
    def insert(self, sweep_id: str, spec: dict[str, Any], name: str, total: int, priority: int) -> bool:
        """A new running sweep; False (and nothing written) when the id exists."""

    def lock(self, sweep_id: str) -> Row | None:
        """The sweep row (without its spec; ``has_spec`` says whether it has one), locked for the transaction."""

    def cap(self, sweep_id: str, total: int, note: str) -> None:
        """Launch no trial from index ``total`` on, and say why."""

    def finish(self, sweep_id: str, state: str = "completed", error: str | None = None) -> None:
        """End a running sweep (a sweep already ended stays as it is)."""

    def set_study_attrs(self, sweep_id: str, attrs: dict[str, Any]) -> None: ...

    def fail(self, sweep_id: str, error: str) -> None:
        """End a running sweep as failed and cancel its trials in flight."""

    def spec(self, sweep_id: str) -> tuple[dict[str, Any], int] | None:
        """The sweep's spec and its version; None without one."""

    def insert_rejected(self, sweep_id: str, name: str, error: str) -> None:
        """A sweep that never ran, with the reason (nothing written when the id exists)."""

    def fill_tombstone(self, sweep_id: str, spec: dict[str, Any], name: str, total: int) -> None:
        """Give its spec to a sweep cancelled before it came (:func:`.store.fill_tombstone`)."""

    def extend(self, sweep_id: str, spec: dict[str, Any], total: int) -> None:
        """The next spec version; an ended sweep runs again (its history intact)."""

    def cancel(self, sweep_id: str) -> int | None:
        """Cancel the sweep and its trials not yet ended; how many trials, or None (nothing written) without the sweep."""

    def remember_early_cancel(self, sweep_id: str) -> bool:
        """Keep a cancel of a sweep not seen yet (a day); False when too many are kept."""

    def take_early_cancel(self, sweep_id: str) -> bool:
        """Whether a cancel of this sweep came before it (and forget it)."""


class TrialRepository(Protocol):
    def insert(self, sweep_id: str, trials: list[store.NewTrial], advance: bool = True) -> None:
        """New ``pending`` trials (an existing index is left as it is); ``advance`` (regular
        trials, not smoke ones): the sweep's ``next_index`` moves past the last one."""

    def get(self, trial_ids: list[str]) -> dict[str, tuple[Row, TrialView]]:
        """These trials, locked; unknown ids left out."""

    def update(self, trial_id: str, update: TrialUpdate) -> None:
        """Write a decision's update (:func:`.store.apply_update`'s semantics)."""

    def merge_curve(self, trial_id: str, points: list[tuple[int, float]]) -> None: ...

    def in_flight(self, sweep_id: str) -> tuple[int, int]:
        """Trials pending, queued or running; and how many of those wait (pending or queued)."""

    def history(self, sweep_id: str, spec: SweepSpec, *, steps: list[int] | None = None, full_curve: str | None = None,
                pruned_curves: bool = False) -> History:
        """The search's records (:func:`.searching.history`)."""

    def usage(self, sweep_id: str, spec: SweepSpec, budget_param: str | None = None,
              ended: tuple[str, float | None] | None = None) -> Usage:
        """What the sweep used so far (:func:`.searching.usage`)."""

    def journal(self, events: Sequence[Envelope], bodies: Mapping[str, bytes]) -> None:
        """Record lifecycle events once each, by message id (:func:`spotsweep.shared.db.journal.journal`)."""

    def outcomes(self, sweep_id: str) -> Outcomes:
        """The sweep's regular (not smoke) trials by state, and its first failed trial's error."""

    def end_segment(self, trial_id: str, sweep_id: str, end_step: int, params: dict[str, Any], value: float) -> int:
        """PBT: the value the trial's latest segment ended with (its first written when none is); its number."""

    def add_segment(self, segment: Segment) -> None:
        """PBT: the segment a trial goes on with (once: a redelivered decision writes nothing)."""

    def copies_to_do(self, sweep_id: str | None) -> list[Row]:
        """PBT: exploit copies not done of pending trials (:func:`.lineage.copies_to_do`)."""

    def mark_copied(self, trial_id: str, segment: int, step: int | None, note: str | None) -> None:
        """PBT: an exploit copy done, with the step copied or why none was (once)."""

    def newest_checkpoints(self, trial_ids: list[str]) -> list[Row]:
        """Each trial's newest journaled checkpoint (``trial_id``, ``sweep_id``, ``uri``); none without one."""

    def pending(self, sweep_id: str | None) -> list[Row]:
        """The outbox (:func:`.store.pending_trials`): a page of ``pending`` trials with their sweep's
        ``spec_version``, locked, in sweep and index order; none whose exploit copy is still to do."""

    def mark_queued(self, trial_ids: list[str]) -> None:
        """Published: these ``pending`` trials are ``queued`` (:func:`.store.mark_queued`)."""


def _on_conn(f: Callable[Concatenate[Conn, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method calling ``f`` with the repository's connection first."""
    def method(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return f(self.conn, *args, **kwargs)
    return method


class PgSweeps:
    """:class:`SweepRepository` over one transaction's connection."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    insert = _on_conn(store.insert_sweep)
    lock = _on_conn(store.lock_sweep)
    cap = _on_conn(store.cap_sweep)
    finish = _on_conn(store.finish_sweep)
    set_study_attrs = _on_conn(store.set_study_attrs)
    fail = _on_conn(store.fail_sweep)
    spec = _on_conn(store.get_spec)
    insert_rejected = _on_conn(store.insert_rejected)
    fill_tombstone = _on_conn(store.fill_tombstone)
    extend = _on_conn(store.extend_sweep)
    cancel = _on_conn(store.cancel_sweep)
    remember_early_cancel = _on_conn(store.remember_early_cancel)
    take_early_cancel = _on_conn(store.take_early_cancel)


class PgTrials:
    """:class:`TrialRepository` over one transaction's connection."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    insert = _on_conn(store.insert_trials)
    get = _on_conn(store.get_trials)
    update = _on_conn(store.apply_update)
    merge_curve = _on_conn(store.merge_curve)
    in_flight = _on_conn(store.in_flight)
    history = _on_conn(history)
    usage = _on_conn(usage)
    journal = _on_conn(journal)
    outcomes = _on_conn(store.outcomes)
    end_segment = _on_conn(lineage.end_segment)
    add_segment = _on_conn(lineage.add_segment)
    copies_to_do = _on_conn(lineage.copies_to_do)
    mark_copied = _on_conn(lineage.mark_copied)
    newest_checkpoints = _on_conn(lineage.newest_checkpoints)
    pending = _on_conn(store.pending_trials)
    mark_queued = _on_conn(store.mark_queued)
