"""The planner's application context: what every part of the application reads (the
database or a test's units of work, the broker, parsed specs and searches, the policy).

Below the handlers, the commands and the event service, so they import it and
never the handlers back; :mod:`.main` builds one per connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from spotsweep.services.planner.histories import HistoryCache
from spotsweep.services.planner.policy import Policy
from spotsweep.services.planner.ports import SweepRepository
from spotsweep.services.planner.search import Search
from spotsweep.services.planner.unit import UnitOfWork, unit_of_work
from spotsweep.shared import topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import PlannerSettings, default
from spotsweep.shared.spec import SweepSpec, parse_spec

CACHE = 256  # parsed specs and searches kept, by sweep and spec version
# Trials of one sweep waiting in the queue at once; its one default and why it
# is what it is: PlannerSettings.queue_window (shared/settings.py).
QUEUE_WINDOW: int = default(PlannerSettings, "queue_window")


@dataclass
class PlannerDeps:
    """The database (or ``units``: a test's units of work in memory), the broker, and what is kept between messages."""

    db: Database
    broker: Broker
    window: int | None = QUEUE_WINDOW
    _specs: dict[tuple[str, int], SweepSpec] = field(default_factory=dict)
    _searches: dict[tuple[str, int], Search] = field(default_factory=dict)
    histories: HistoryCache = field(default_factory=HistoryCache)  # each sweep's search history, between events
    units: Callable[[], AbstractContextManager[UnitOfWork]] | None = None  # units of work not over ``db`` (tests)
    _classes: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    batchers: list[Any] = field(default_factory=list)  # consumers' batching wrappers, closed with the connection
    store: ArtifactStore | None = None  # where pruned trials' checkpoints are deleted (:func:`.effects.discard_checkpoints`)
    policy: Policy = field(default_factory=Policy)  # who may command the planner, what may run (:mod:`.policy`)

    def close(self) -> None:
        """Flush and stop the batching wrappers (their unsettled deliveries go back with the connection)."""
        for batcher in self.batchers:
            batcher.close()
        self.batchers.clear()

    def ensure_queue(self, resource_class: str) -> None:
        """Declare a class's trial queue before the first publish to it, so
        trials wait durably even when no agent of that class has started."""
        if resource_class not in self._classes:
            self.broker.declare([topology.trial_queue_spec(resource_class)])
            self._classes.add(resource_class)

    def spec(self, sweep_id: str, raw: dict[str, Any], version: int = 0) -> SweepSpec:
        """Parsed specs, cached per version (only ``extend`` changes a sweep's spec)."""
        return self._cached(self._specs, (sweep_id, version), lambda: parse_spec(raw))

    def search(self, sweep_id: str, raw: dict[str, Any], version: int = 0) -> Search:
        return self._cached(self._searches, (sweep_id, version), lambda: Search(self.spec(sweep_id, raw, version)))

    def stored_spec(self, sweeps: SweepRepository, sweep_id: str, version: int) -> tuple[SweepSpec, Search]:
        """The spec and search of a sweep at ``version``, read from the database only when not cached."""
        with self._lock:
            spec, search = self._specs.get((sweep_id, version)), self._searches.get((sweep_id, version))
        if spec is not None and search is not None:
            return spec, search
        stored = sweeps.spec(sweep_id)
        if stored is None:
            raise PermanentError(f"sweep {sweep_id!r} has no spec, yet trials of it wait to be published")
        raw, current = stored  # extend may have moved on since the row was read: cache what was read, under its version
        return self.spec(sweep_id, raw, current), self.search(sweep_id, raw, current)

    def unit(self) -> AbstractContextManager[UnitOfWork]:
        """A unit of work: over PostgreSQL, or what ``units`` makes (a test's, in memory)."""
        return self.units() if self.units is not None else unit_of_work(self.db, self.histories)

    def _cached(self, cache: dict[Any, Any], key: tuple[str, int], make: Any) -> Any:
        with self._lock:
            value = cache.pop(key, None)
        if value is None:
            value = make()
        with self._lock:
            cache[key] = value  # most recently used last
            while len(cache) > CACHE:
                del cache[next(iter(cache))]
        return value
