"""Planner handlers: ``(delivery, deps)`` functions that tests call directly.

Exactly-once effects on at-least-once delivery:
* A spec is written with ``ON CONFLICT DO NOTHING`` on its sweep id, so a
  redelivered submission changes nothing.
* New trials are written as ``pending`` in the same transaction as the
  decision that launched them (an outbox); :func:`publish_pending` then
  publishes them with publisher confirms and marks them ``queued``. A crash
  between the two leaves them ``pending``, and the next planner publishes
  them at start. The one window for a duplicate trial message is a crash
  after the broker confirmed a batch (at most 100) but before ``queued``
  committed; the duplicate
  runs the same attempt and its events are absorbed (terminal states are
  immutable, points are unique per trial, attempt, step and name).
* Every lifecycle event is decided under a row lock on its sweep, fenced by
  attempt, and acked only after the commit.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from spotsweep.services.planner import store
from spotsweep.services.planner.decide import Decision, RetryPolicy, SweepState, decide, fill
from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker, Delivery, Outgoing
from spotsweep.shared.db import Database
from spotsweep.shared.errors import DecodeError, SpecError
from spotsweep.shared.messages import (
    CancelSweep, StopTrial, TrialFinished, TrialLost, TrialMessage, TrialStarted, decode, encode,
)
from spotsweep.shared.naming import render_argv, trial_name
from spotsweep.shared.space import params_at, total_trials
from spotsweep.shared.spec import SweepSpec, parse_spec
from spotsweep.shared.states import TrialState

_log = log.get("spotsweep.planner")
SPEC_CACHE = 256  # parsed specs kept; a sweep's spec never changes


@dataclass
class PlannerDeps:
    db: Database
    broker: Broker
    _specs: dict[str, SweepSpec] = field(default_factory=dict)
    _classes: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def ensure_queue(self, resource_class: str) -> None:
        """Declare a class's trial queue before the first publish to it, so
        trials wait durably even when no agent of that class has started."""
        if resource_class not in self._classes:
            self.broker.declare([topology.trial_queue_spec(resource_class)])
            self._classes.add(resource_class)

    def spec(self, sweep_id: str, raw: dict[str, Any]) -> SweepSpec:
        """Parsed specs, cached: the spec of a sweep never changes."""
        with self._lock:
            spec = self._specs.pop(sweep_id, None) or parse_spec(raw)
            self._specs[sweep_id] = spec  # most recently used last
            while len(self._specs) > SPEC_CACHE:
                del self._specs[next(iter(self._specs))]
            return spec


def retry_policy(spec: SweepSpec) -> RetryPolicy:
    r = spec.retries
    return RetryPolicy(max_failures=r.max_failures, on_oom=r.on_oom, batch_param=r.batch_param, accum_param=r.accum_param)


def new_sweep_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def submission(spec: SweepSpec, sweep_id: str) -> Outgoing:
    """The message ``handle_sweep_message`` accepts: the spec as a JSON body."""
    body = json.dumps(spec.to_json_dict()).encode()
    return Outgoing("", topology.SWEEPS_QUEUE, body, headers={"sweep_id": sweep_id}, message_id=sweep_id,
                    priority=spec.priority)


def cancellation(sweep_id: str) -> Outgoing:
    """Cancel a sweep; top priority, so it overtakes queued submissions."""
    return Outgoing("", topology.SWEEPS_QUEUE, b"{}", headers={"kind": "cancel", "sweep_id": sweep_id},
                    priority=topology.MAX_PRIORITY)


def handle_sweep_message(delivery: Delivery, deps: PlannerDeps) -> None:
    """A spec to start, or a command (header ``kind: cancel``) about a sweep."""
    headers = delivery.headers
    if headers.get("kind") == "cancel":
        _cancel(str(headers.get("sweep_id") or ""), deps)
        delivery.ack()
        return
    sweep_id = str(headers.get("sweep_id") or delivery.message_id or "")
    try:
        data = json.loads(delivery.body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        if sweep_id:
            with deps.db.transaction() as conn:
                store.insert_rejected(conn, sweep_id, "?", f"body is not JSON: {e}")
        raise DecodeError(f"sweep message body is not JSON: {e}") from e
    name = str(data.get("name", "?")) if isinstance(data, dict) else "?"
    try:
        spec = parse_spec(data)
    except SpecError as e:
        sweep_id = sweep_id or new_sweep_id(name if name.isidentifier() else "rejected")
        _log.warning("spec rejected", sweep_id=sweep_id, error=str(e))
        with deps.db.transaction() as conn:
            store.insert_rejected(conn, sweep_id, name, str(e))
        delivery.ack()
        return
    sweep_id = sweep_id or new_sweep_id(spec.name)
    raw = spec.to_json_dict()
    with log.bound(sweep_id=sweep_id), deps.db.transaction() as conn:
        total = total_trials(spec)
        if store.insert_sweep(conn, sweep_id, raw, spec.name, total, spec.priority):
            _log.info("sweep accepted", name=spec.name, trials=total)
            sweep = store.lock_sweep(conn, sweep_id)
            assert sweep is not None
            state = store.sweep_state(conn, sweep, spec.max_concurrent, retry_policy(spec))
            _launch(conn, sweep_id, spec, state.next_index, fill(state)[0])
        else:
            store.fill_tombstone(conn, sweep_id, raw, spec.name, total)
    publish_pending(deps, sweep_id)
    delivery.ack()


def handle_event(delivery: Delivery, deps: PlannerDeps) -> None:
    """A lifecycle event: record it on the trial, retry or finish, launch more."""
    event = decode(delivery.body)
    if not isinstance(event, (TrialStarted, TrialFinished, TrialLost)):
        delivery.ack()
        return
    with log.bound(sweep_id=event.sweep_id, trial_id=event.trial_id, attempt=event.attempt), deps.db.transaction() as conn:
        sweep = store.lock_sweep(conn, event.sweep_id)
        found = store.get_trial(conn, event.trial_id) if sweep else None
        if sweep is None or found is None or sweep["spec"] is None:
            _log.warning("event for an unknown trial", kind=event.kind)
            delivery.ack()
            return
        spec = deps.spec(event.sweep_id, sweep["spec"])
        state: SweepState = store.sweep_state(conn, sweep, spec.max_concurrent, retry_policy(spec))
        decision = decide(state, found[1], event)
        # An agent started a trial of a cancelled sweep: it missed the
        # broadcast (it started or reconnected after it), so say it again.
        recancel = isinstance(event, TrialStarted) and found[1].state == TrialState.CANCELLED
        if decision.update is not None:
            store.apply_update(conn, event.trial_id, decision.update)
            _log.info("trial " + decision.update.state.value, kind=event.kind)
        else:
            _log.info("event ignored", kind=event.kind, reason=decision.reason)
        if decision.launch:
            _launch(conn, event.sweep_id, spec, state.next_index, decision.launch)
        if decision.sweep_done:
            store.finish_sweep(conn, event.sweep_id)
            _log.info("sweep completed")
    if recancel:
        _broadcast_cancel(deps, event.sweep_id)
    _send_stop(deps, event, decision)
    # Always drain this sweep's outbox (one indexed query): if a previous
    # delivery of this event committed its decision but failed to publish,
    # its redelivery decides nothing new and must still publish.
    publish_pending(deps, event.sweep_id)
    delivery.ack()


def _send_stop(deps: PlannerDeps, event: TrialStarted | TrialFinished | TrialLost, decision: Decision) -> None:
    """Tell the agents to stop a run that must not go on (after the commit)."""
    if decision.stop is None:
        return
    stop = StopTrial(sweep_id=event.sweep_id, trial_id=event.trial_id, attempt=decision.stop.attempt,
                     run_id=decision.stop.run_id, reason=decision.stop.reason)
    _log.info("stopping a run", run_id=stop.run_id, reason=stop.reason)
    deps.broker.publish(Outgoing(topology.CONTROL_EXCHANGE, "", encode(stop)))


def _launch(conn: Any, sweep_id: str, spec: SweepSpec, first: int, n: int) -> None:
    trials = []
    for index in range(first, first + n):
        params = params_at(spec, index)
        if spec.retries.on_oom == "halve_batch":
            params.setdefault(spec.retries.accum_param, 1)  # the accumulation an OOM retry doubles
        trials.append((trial_name(spec, index, params), params))
    store.insert_trials(conn, sweep_id, first, trials)


def trial_message(row: dict[str, Any], spec: SweepSpec) -> TrialMessage:
    params = row["params"]
    extra = {"index": row["idx"], "trial_name": row["trial_name"]}
    return TrialMessage(
        sweep_id=row["sweep_id"],
        trial_id=row["trial_id"],
        attempt=row["attempt"],
        trial_name=row["trial_name"],
        index=row["idx"],
        params=params,
        argv=render_argv(spec.command, params, extra),
        env=dict(spec.env),
        metric=spec.metric.name,
        gpus=spec.resources.gpus,
        resource_class=spec.resources.resource_class,
        max_lost=spec.retries.max_lost,
        stall_timeout=spec.timeout.stall,
        total_timeout=spec.timeout.total,
        elapsed=float(row.get("run_seconds") or 0.0),
    )


def publish_pending(deps: PlannerDeps, sweep_id: str | None = None) -> int:
    """Publish the outbox (``pending`` trials) with confirms, then mark them queued."""
    published = 0
    while True:
        with deps.db.transaction() as conn:
            rows = store.pending_trials(conn, sweep_id)
            if not rows:
                return published
            out = []
            for row in rows:
                spec = deps.spec(row["sweep_id"], row["spec"])
                deps.ensure_queue(spec.resources.resource_class)
                msg = trial_message(row, spec)
                out.append(
                    Outgoing(
                        topology.TRIALS_EXCHANGE,
                        spec.resources.resource_class,
                        encode(msg),
                        headers={"sweep_id": msg.sweep_id, "trial_id": msg.trial_id, "attempt": msg.attempt},
                        message_id=f"{msg.trial_id}#{msg.attempt}",
                        priority=spec.priority,  # the spec bounds it to the queues' 0..9
                    )
                )
            deps.broker.publish_many(out)
            store.mark_queued(conn, [r["trial_id"] for r in rows])
            published += len(rows)


def _cancel(sweep_id: str, deps: PlannerDeps) -> None:
    if not sweep_id:
        raise DecodeError("cancel command without a sweep_id header")
    with deps.db.transaction() as conn:
        n = store.cancel_sweep(conn, sweep_id)
    _log.info("sweep cancelled", sweep_id=sweep_id, trials=n)
    _broadcast_cancel(deps, sweep_id)


def _broadcast_cancel(deps: PlannerDeps, sweep_id: str) -> None:
    deps.broker.publish(Outgoing(topology.CONTROL_EXCHANGE, "", encode(CancelSweep(sweep_id=sweep_id))))
