"""The planner's unit of work: one transaction's trial writes, staged (docs/architecture.md).

A batch may touch one trial several times (a short run's start and end): its
row as the decisions so far leave it and the update still to write, merged
into one (:func:`~.decide.merged`), serve the next decision about it. Every
other read goes to the repositories, so the staged updates are written first
(and at commit). With PostgreSQL it also owns the search histories' cache
(:mod:`.histories`): what a failed transaction read is dropped, as it may
never have been committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import TrialUpdate, TrialView, merged
from spotsweep.services.planner.histories import HistoryCache
from spotsweep.services.planner.ports import History, PgSweeps, PgTrials, SweepRepository, TrialRepository
from spotsweep.shared.db import Conn, Database, Row
from spotsweep.shared.spec import SweepSpec


class UnitOfWork:
    """Trial rows and their staged updates within one transaction, over the repositories."""

    def __init__(self, sweeps: SweepRepository, trials: TrialRepository, histories: HistoryCache | None = None,
                 conn: Conn | None = None) -> None:
        self._sweeps, self._trials = sweeps, trials
        self._histories = histories  # with ``conn``: the PostgreSQL adapter's kept histories
        self._conn = conn
        self._rows: dict[str, tuple[Row, TrialView]] = {}
        self._staged: dict[str, TrialUpdate] = {}
        self.read_sweeps: set[str] = set()  # histories read: dropped if the transaction fails

    @property
    def sweeps(self) -> SweepRepository:
        """The sweeps, once every staged update is written."""
        self.flush()
        return self._sweeps

    @property
    def trials(self) -> TrialRepository:
        """The trials, once every staged update is written."""
        self.flush()
        return self._trials

    @property
    def conn(self) -> Conn:
        """The transaction's connection (PostgreSQL only), with every staged update written."""
        assert self._conn is not None, "a unit of work in memory has no connection"
        self.flush()
        return self._conn

    def pipeline(self) -> AbstractContextManager[object]:
        """Pipeline mode for a run of writes: a read waits only for what was sent before it."""
        return self._conn.pipeline() if self._conn is not None else nullcontext()

    def load(self, trial_ids: list[str]) -> None:
        """Read and lock these trials in one round trip (in a fixed order: no deadlocks)."""
        self._rows.update(self.trials.get(trial_ids))

    def trial(self, trial_id: str) -> tuple[Row, TrialView] | None:
        """A loaded trial as the decisions staged so far leave it; None when unknown."""
        return self._rows.get(trial_id)

    def stage(self, trial_id: str, update: TrialUpdate) -> None:
        """Record a decision's update, merged with the one staged before it."""
        prior = self._staged.pop(trial_id, None)
        both = update if prior is None else merged(prior, update)
        if both is None:  # not expressible as one: the prior goes first
            self._trials.update(trial_id, prior)  # type: ignore[arg-type]
            both = update
        self._staged[trial_id] = both
        found = self._rows.get(trial_id)
        if found is not None:
            self._rows[trial_id] = store.updated(found[0], update)

    def flush(self) -> None:
        """Write the staged updates (in pipeline mode they go out without a round trip each)."""
        staged, self._staged = self._staged, {}
        for trial_id, update in staged.items():
            self._trials.update(trial_id, update)

    def history(self, sweep_id: str, spec: SweepSpec, *, steps: list[int] | None = None, full_curve: str | None = None,
                pruned_curves: bool = False) -> History:
        """The sweep's search history (:func:`.searching.history`), kept between transactions."""
        if self._histories is None or self._conn is None:
            return self.trials.history(sweep_id, spec, steps=steps, full_curve=full_curve, pruned_curves=pruned_curves)
        self.read_sweeps.add(sweep_id)
        return self._histories.read(self.conn, sweep_id, spec, steps=steps, full_curve=full_curve,
                                    pruned_curves=pruned_curves)


@contextmanager
def unit_of_work(db: Database, histories: HistoryCache) -> Iterator[UnitOfWork]:
    """A transaction with its unit of work over PostgreSQL: flushed before the
    commit; a failure rolls back and forgets the histories it read."""
    uow: UnitOfWork | None = None
    try:
        with db.transaction() as conn:
            uow = UnitOfWork(PgSweeps(conn), PgTrials(conn), histories, conn)
            yield uow
            uow.flush()
    except BaseException:
        for sweep_id in uow.read_sweeps if uow is not None else ():
            histories.drop(sweep_id)
        raise
