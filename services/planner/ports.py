"""The planner's repositories: what deciding trial events reads and writes of sweeps and trials.

Two adapters implement them: :class:`PgSweeps`/:class:`PgTrials`, over one
transaction's connection (the SQL of :mod:`.store` and :mod:`.searching`),
and :mod:`.memory`'s dictionaries, so that planner logic can be tested
without PostgreSQL. One contract suite (tests/services/planner/test_ports.py)
runs over both, as Optuna runs its storage tests over every storage.

Rows are dictionaries with the columns of ``trials`` and ``sweeps`` that
the decisions read (:data:`.store._DECIDED` for trials).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

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
        """The next spec version; an ended sweep runs again."""

    def cancel(self, sweep_id: str) -> int | None:
        """Cancel the sweep and its trials not yet ended; how many trials, or None (nothing written) without the sweep."""

    def remember_early_cancel(self, sweep_id: str) -> bool:
        """Keep a cancel of a sweep not seen yet (a day); False when too many are kept."""

    def take_early_cancel(self, sweep_id: str) -> bool:
        """Whether a cancel of this sweep came before it (and forget it)."""


class TrialRepository(Protocol):
    def insert(self, sweep_id: str, trials: list[store.NewTrial], advance: bool = True) -> None:
        """New ``pending`` trials (an existing index is left as it is); ``advance``:
        the sweep's ``next_index`` moves past the last one."""

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
        """PBT: the segment a trial goes on with (once)."""

    def copies_to_do(self, sweep_id: str | None) -> list[Row]:
        """PBT: exploit copies not done of pending trials (:func:`.lineage.copies_to_do`)."""

    def mark_copied(self, trial_id: str, segment: int, step: int | None, note: str | None) -> None:
        """PBT: an exploit copy done, with the step copied or why none was (once)."""

    def newest_checkpoints(self, trial_ids: list[str]) -> list[Row]:
        """Each trial's newest journaled checkpoint (``trial_id``, ``sweep_id``, ``uri``)."""

    def pending(self, sweep_id: str | None) -> list[Row]:
        """The outbox (:func:`.store.pending_trials`): a page of ``pending`` trials with their sweep's
        ``spec_version``, locked, in sweep and index order; none whose exploit copy is still to do."""

    def mark_queued(self, trial_ids: list[str]) -> None:
        """Published: these ``pending`` trials are ``queued`` (:func:`.store.mark_queued`)."""


class PgSweeps:
    """:class:`SweepRepository` over one transaction's connection."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def insert(self, sweep_id: str, spec: dict[str, Any], name: str, total: int, priority: int) -> bool:
        return store.insert_sweep(self.conn, sweep_id, spec, name, total, priority)

    def lock(self, sweep_id: str) -> Row | None:
        return store.lock_sweep(self.conn, sweep_id)

    def cap(self, sweep_id: str, total: int, note: str) -> None:
        store.cap_sweep(self.conn, sweep_id, total, note)

    def finish(self, sweep_id: str, state: str = "completed", error: str | None = None) -> None:
        store.finish_sweep(self.conn, sweep_id, state, error)

    def set_study_attrs(self, sweep_id: str, attrs: dict[str, Any]) -> None:
        store.set_study_attrs(self.conn, sweep_id, attrs)

    def fail(self, sweep_id: str, error: str) -> None:
        store.fail_sweep(self.conn, sweep_id, error)

    def spec(self, sweep_id: str) -> tuple[dict[str, Any], int] | None:
        return store.get_spec(self.conn, sweep_id)

    def insert_rejected(self, sweep_id: str, name: str, error: str) -> None:
        store.insert_rejected(self.conn, sweep_id, name, error)

    def fill_tombstone(self, sweep_id: str, spec: dict[str, Any], name: str, total: int) -> None:
        store.fill_tombstone(self.conn, sweep_id, spec, name, total)

    def extend(self, sweep_id: str, spec: dict[str, Any], total: int) -> None:
        store.extend_sweep(self.conn, sweep_id, spec, total)

    def cancel(self, sweep_id: str) -> int | None:
        return store.cancel_sweep(self.conn, sweep_id)

    def remember_early_cancel(self, sweep_id: str) -> bool:
        return store.remember_early_cancel(self.conn, sweep_id)

    def take_early_cancel(self, sweep_id: str) -> bool:
        return store.take_early_cancel(self.conn, sweep_id)


class PgTrials:
    """:class:`TrialRepository` over one transaction's connection."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def insert(self, sweep_id: str, trials: list[store.NewTrial], advance: bool = True) -> None:
        store.insert_trials(self.conn, sweep_id, trials, advance)

    def get(self, trial_ids: list[str]) -> dict[str, tuple[Row, TrialView]]:
        return store.get_trials(self.conn, trial_ids)

    def update(self, trial_id: str, update: TrialUpdate) -> None:
        store.apply_update(self.conn, trial_id, update)

    def merge_curve(self, trial_id: str, points: list[tuple[int, float]]) -> None:
        store.merge_curve(self.conn, trial_id, points)

    def in_flight(self, sweep_id: str) -> tuple[int, int]:
        return store.in_flight(self.conn, sweep_id)

    def history(self, sweep_id: str, spec: SweepSpec, *, steps: list[int] | None = None, full_curve: str | None = None,
                pruned_curves: bool = False) -> History:
        return history(self.conn, sweep_id, spec, steps=steps, full_curve=full_curve, pruned_curves=pruned_curves)

    def usage(self, sweep_id: str, spec: SweepSpec, budget_param: str | None = None,
              ended: tuple[str, float | None] | None = None) -> Usage:
        return usage(self.conn, sweep_id, spec, budget_param, ended)

    def journal(self, events: Sequence[Envelope], bodies: Mapping[str, bytes]) -> None:
        journal(self.conn, events, bodies)

    def outcomes(self, sweep_id: str) -> Outcomes:
        return store.outcomes(self.conn, sweep_id)

    def end_segment(self, trial_id: str, sweep_id: str, end_step: int, params: dict[str, Any], value: float) -> int:
        return lineage.end_segment(self.conn, trial_id, sweep_id, end_step, params, value)

    def add_segment(self, segment: Segment) -> None:
        lineage.add_segment(self.conn, segment)

    def copies_to_do(self, sweep_id: str | None) -> list[Row]:
        return lineage.copies_to_do(self.conn, sweep_id)

    def mark_copied(self, trial_id: str, segment: int, step: int | None, note: str | None) -> None:
        lineage.mark_copied(self.conn, trial_id, segment, step, note)

    def newest_checkpoints(self, trial_ids: list[str]) -> list[Row]:
        return lineage.newest_checkpoints(self.conn, trial_ids)

    def pending(self, sweep_id: str | None) -> list[Row]:
        return store.pending_trials(self.conn, sweep_id)

    def mark_queued(self, trial_ids: list[str]) -> None:
        store.mark_queued(self.conn, trial_ids)
