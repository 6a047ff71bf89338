"""Planner handlers: ``(delivery, deps)`` functions that tests call directly.

Exactly-once effects on at-least-once delivery:
* A spec is written with ``ON CONFLICT DO NOTHING`` on its sweep id, so a
  redelivered submission changes nothing.
* New trials are written as ``pending`` in the same transaction as the
  decision that launched them (the outbox, :mod:`.outbox`), published with
  confirms after the commit.
* Every trial event is decided under a row lock on its sweep, fenced by
  attempt and run, and acked only after the commit (:mod:`.events`).
* Commands on the sweeps queue are typed messages (``SubmitSweep``,
  ``CancelSweep``, ``ExtendSweep``; untyped bodies of older CLIs are still
  read, :func:`.bodies.sweep_command`). ``cancel`` and ``extend`` are
  idempotent too: a cancelled sweep stays cancelled, and an extension
  carries the spec version it extends, so a redelivered one changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from spotsweep.services.planner import store
from spotsweep.services.planner.bodies import (
    REJECTED, Submission, UndecodableSubmission, new_sweep_id, safe_name, sweep_command,
)
from spotsweep.services.planner.effects import broadcast_cancel, send
from spotsweep.services.planner.extend import extended
from spotsweep.services.planner.histories import HistoryCache
from spotsweep.services.planner.launch import top_up
from spotsweep.services.planner.outbox import publish_pending, trial_message
from spotsweep.services.planner.policy import Policy, command_problem, sender_problem
from spotsweep.services.planner.search import Search
from spotsweep.services.planner.service import on_events
from spotsweep.services.planner.ports import SweepRepository
from spotsweep.services.planner.unit import UnitOfWork, unit_of_work
from spotsweep.services.planner.untrusted import bare
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError, RetryableError, SpecError
from spotsweep.shared.limits import MAX_TOTAL_TRIALS, cap_text
from spotsweep.shared.messages import (
    CancelSweep, ExtendSweep, SubmitSweep, decode, encode, unpack,
)
from spotsweep.shared.settings import PlannerSettings, default
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec, parse_spec

__all__ = ["PlannerDeps", "cancellation", "extension", "handle_event", "handle_events", "handle_sweep_message", "new_sweep_id",
           "publish_pending", "submission", "trial_message"]

_log = log.get("spotsweep.planner")
CACHE = 256  # parsed specs and searches kept, by sweep and spec version
# Trials of one sweep waiting in the queue at once; its one default and why it
# is what it is: PlannerSettings.queue_window (shared/settings.py).
QUEUE_WINDOW: int = default(PlannerSettings, "queue_window")


@dataclass
class PlannerDeps:
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


def submission(spec: SweepSpec, sweep_id: str) -> Outgoing:
    """The message ``handle_sweep_message`` accepts: a typed :class:`SubmitSweep`."""
    body = encode(SubmitSweep(message_id=sweep_id, sweep_id=sweep_id, spec=spec.to_json_dict()))
    return Outgoing("", topology.SWEEPS_QUEUE, body, headers={"sweep_id": sweep_id}, message_id=sweep_id,
                    priority=spec.priority)


def cancellation(sweep_id: str) -> Outgoing:
    """Cancel a sweep; top priority, so it overtakes queued submissions."""
    # The header ``kind`` too: a planner from before the typed commands still reads it.
    return Outgoing("", topology.SWEEPS_QUEUE, encode(CancelSweep(sweep_id=sweep_id)),
                    headers={"kind": "cancel", "sweep_id": sweep_id}, priority=topology.MAX_PRIORITY)


def extension(sweep_id: str, version: int, trials: int = 0, budget: dict[str, Any] | None = None) -> Outgoing:
    """Extend spec version ``version`` of a sweep by ``trials`` and/or new ``budget`` caps."""
    message_id = f"{sweep_id}+v{version}"
    body = encode(ExtendSweep(message_id=message_id, sweep_id=sweep_id, version=version, trials=trials,
                              budget=budget or {}))
    # The header ``kind`` too: a planner from before the typed commands reads the same body keys.
    return Outgoing("", topology.SWEEPS_QUEUE, body, headers={"kind": "extend", "sweep_id": sweep_id},
                    message_id=message_id, priority=topology.MAX_PRIORITY)


def handle_sweep_message(delivery: Delivery, deps: PlannerDeps) -> None:
    """A typed command (submit, cancel, extend) about a sweep, or the untyped
    body of an older client (a spec; header ``kind``: ``cancel``, ``extend``).

    The message is untrusted (:mod:`.bodies`): a bad id or an undecodable body
    raises :class:`DecodeError` (dead-lettered with the reason); any other
    failure to accept a spec records the sweep as ``rejected`` with the
    reason, so whoever waits on it sees it end. A sender not among the
    policy's submitters (:mod:`.policy`) has its submission recorded as
    rejected and its cancel or extend dead-lettered, with the reason."""
    refused = sender_problem(deps.policy, getattr(delivery, "user_id", None))
    try:
        command = sweep_command(delivery.headers, delivery.message_id, delivery.body)
    except UndecodableSubmission as e:
        if refused is not None:
            raise PermanentError(refused) from e
        if e.sweep_id is not None:  # someone may wait on it: say why it never ran
            _reject(deps, e.sweep_id, REJECTED, str(e))
        raise
    if refused is not None:
        if not isinstance(command, Submission):
            raise PermanentError(f"{command.kind} of {command.sweep_id}: {refused}")
        _reject(deps, command.sweep_id, safe_name(command.name) or command.sweep_id, refused)
    else:
        _COMMANDS[command.kind](command, deps)
    delivery.ack()


def _submit(submitted: Submission, deps: PlannerDeps) -> None:
    sweep_id, data, name = submitted.sweep_id, submitted.spec, submitted.name
    with log.bound(sweep_id=sweep_id):
        try:
            spec, search = _accepted(data, deps.policy)
        except RetryableError:
            raise
        except Exception as e:  # a spec error, or a search that cannot be built from it
            _reject(deps, sweep_id, safe_name(name) or sweep_id, str(e) or type(e).__name__)
            return
        try:
            _start(deps, sweep_id, spec, search)
        except PermanentError as e:  # the database refused it: rolled back, recorded as rejected instead
            _reject(deps, sweep_id, spec.name, f"the planner could not store the sweep: {e}")
            return
    publish_pending(deps, sweep_id)


def _accepted(data: Any, policy: Policy) -> tuple[SweepSpec, Search]:
    """The spec and its search, or the error that refuses them (the policy's command check among them)."""
    spec = parse_spec(data)
    if (problem := command_problem(policy, spec.command, spec.env)) is not None:
        raise SpecError([("command", problem)])
    total = total_trials(spec)
    if total > MAX_TOTAL_TRIALS:  # parse_spec refuses these too; the database's bigint is the planner's own bound
        raise SpecError([("space", f"the sweep would have {total:.3g} trials; at most 2^53 can be counted")])
    return spec, Search(spec)


def _start(deps: PlannerDeps, sweep_id: str, spec: SweepSpec, search: Search) -> None:
    raw = spec.to_json_dict()
    with unit_of_work(deps.db, deps.histories) as uow:
        conn = uow.conn
        total = total_trials(spec)
        if store.insert_sweep(conn, sweep_id, raw, spec.name, total, spec.priority):
            if store.take_early_cancel(conn, sweep_id):
                store.cancel_sweep(conn, sweep_id)
                _log.info("sweep cancelled before it started (the cancel came first)", name=spec.name)
                return
            _log.info("sweep accepted", name=spec.name, trials=total)
            top_up(uow, sweep_id, spec, search, deps.window)
        else:
            store.fill_tombstone(conn, sweep_id, raw, spec.name, total)


def _reject(deps: PlannerDeps, sweep_id: str, name: str, error: str) -> None:
    _log.warning("spec rejected", sweep_id=sweep_id, error=cap_text(error, 500))
    with deps.db.transaction() as conn:
        store.insert_rejected(conn, sweep_id, name, error)


def handle_event(delivery: Delivery, deps: PlannerDeps) -> None:
    """One trial event (see :func:`handle_events`), acked once its effects are committed and sent."""
    handle_events([delivery], deps)
    delivery.ack()


def handle_events(deliveries: Sequence[Delivery], deps: PlannerDeps) -> None:
    """A batch of trial events: record each, retry, promote, prune or finish its
    trial, then launch more. One transaction per sweep in the batch (the events
    in delivery order, the sweep locked once, one top-up at the end), then what
    must be sent: stops, re-broadcast cancels, the outbox. Raises on an
    undecodable message (the batching wrapper isolates and dead-letters it);
    the caller acks the batch after this returns."""
    by_sweep: dict[str, list[Any]] = {}
    bodies: dict[str, bytes] = {}
    over: set[str] = set()  # starts that came inside their run's end
    for d in deliveries:
        event = decode(d.body)
        kind = getattr(event, "kind", None)  # every message model has one; Envelope itself does not say so
        if kind not in topology.PLANNER_KINDS:  # routed here by mistake (a hand-made binding): said, acked
            _log.warning("event of a kind the planner does not decide: acked and not journaled", kind=kind,
                         message_id=event.message_id)
        else:
            # A run shorter than one poll sends its start inside its end: it is
            # decided and journaled as if it had come on its own, just before.
            for one in unpack(event):
                by_sweep.setdefault(event.sweep_id, []).append(one)
                bodies[one.message_id] = d.body if one is event else encode(one)
                if one is not event:
                    over.add(one.message_id)
    for sweep_id, events in by_sweep.items():
        try:
            send(deps, on_events(deps, sweep_id, events, bodies, over))
        except RetryableError:
            raise
        except Exception as e:
            # A trial's end is always recorded: without the values the
            # database (or a decision on them) refused, with the reason. Only
            # for a message alone: in a batch, the batching wrapper first
            # splits it, so that no other trial's end loses its values.
            reason = cap_text(str(e) or type(e).__name__, 500)
            stripped = [bare(ev, reason) for ev in events]
            if len(deliveries) > 1 or all(a is b for a, b in zip(stripped, events)):
                raise
            _log.error("trial ends recorded without their final values", sweep_id=sweep_id, reason=reason)
            bodies.update((ev.message_id, encode(ev)) for ev, old in zip(stripped, events) if ev is not old)
            send(deps, on_events(deps, sweep_id, stripped, bodies, over))


def _extend(command: ExtendSweep, deps: PlannerDeps) -> None:
    sweep_id, trials, budget, version = command.sweep_id, command.trials, dict(command.budget), command.version
    with log.bound(sweep_id=sweep_id), unit_of_work(deps.db, deps.histories) as uow:
        conn = uow.conn
        sweep = store.lock_sweep(conn, sweep_id)
        if sweep is None or sweep["spec"] is None or sweep["state"] not in ("running", "completed"):
            _log.warning("extend refused: no running or completed sweep of that id", state=sweep and sweep["state"])
            return
        if sweep["spec_version"] != version:
            _log.info("extension already applied (or the spec changed since)", version=version)
            return
        try:
            spec = extended(deps.spec(sweep_id, sweep["spec"], version), trials, budget)
        except SpecError as e:
            _log.warning("extend refused", error=str(e))
            return
        store.extend_sweep(conn, sweep_id, spec.to_json_dict(), total_trials(spec))
        _log.info("sweep extended", trials=total_trials(spec), budget=budget or None)
        top_up(uow, sweep_id, spec, deps.search(sweep_id, spec.to_json_dict(), version + 1), deps.window)
    publish_pending(deps, sweep_id)


def _cancel(sweep_id: str, deps: PlannerDeps) -> None:
    """Cancel a known sweep (again: idempotent). An unknown id leaves no sweep
    row: it is remembered a while, hidden, in case its submission is still
    queued behind the cancel (which is posted at top priority)."""
    with log.bound(sweep_id=sweep_id), deps.db.transaction() as conn:
        n = store.cancel_sweep(conn, sweep_id)
        if n is None:
            kept = store.remember_early_cancel(conn, sweep_id)
            _log.warning("cancel of an unknown sweep", kept_for_its_submission=kept)
            return
    _log.info("sweep cancelled", sweep_id=sweep_id, trials=n)
    broadcast_cancel(deps, sweep_id)


# What each command of the sweeps queue does, by its kind (a new command is a row here).
_COMMANDS: dict[str, Callable[[Any, PlannerDeps], None]] = {
    Submission.kind: _submit,
    "sweep.cancel": lambda command, deps: _cancel(command.sweep_id, deps),
    "sweep.extend": _extend,
}
