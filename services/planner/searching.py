"""The search state the planner reads from PostgreSQL, for the pure decisions
in :mod:`.search`: each trial as a :class:`TrialRecord`, and what a sweep has
used so far as a :class:`Usage` (time, trials and training steps).

Everything a decision depends on is in the database (params, states, final
metrics, the values recorded at each rung, the objective's curve, the
sampler's attributes), so a restarted planner decides as the one before it.
Curves can be long: a caller asks only for the steps it needs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotsweep.services.planner.search import TrialRecord, Usage, committed, estimate_trial_seconds, estimate_unit_seconds
from spotsweep.services.planner.search.budget import committed_steps, estimate_trial_steps, trial_steps
from spotsweep.services.planner.search.history import objective_values
from spotsweep.shared.db import Conn, Row
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState


def _floats(data: dict[str, Any] | None) -> dict[int, float]:
    # jsonb keys are strings; non-finite values are stored as "NaN"/"Infinity", which float() reads
    return {int(k): float(v) for k, v in (data or {}).items()}


def history(conn: Conn, sweep_id: str, spec: SweepSpec, *, steps: Sequence[int] | None = None,
            full_curve: str | None = None, pruned_curves: bool = False) -> tuple[list[TrialRecord], list[TrialRecord]]:
    """The sweep's regular trials and its smoke trials (numbered 0, 1, ... by smoke order).

    Curves only at ``steps``, but whole for trial ``full_curve`` and, with
    ``pruned_curves``, for the pruned trials (Optuna ranks a pruned trial by
    its intermediate values, and reads no other trial's).
    """
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM trials WHERE sweep_id = %(sweep)s ORDER BY idx",
        curve_args(sweep_id, steps, full_curve, pruned_curves),
    ).fetchall()
    return split([(r["idx"], record_from_row(r, spec)) for r in rows])


# A trial's search record; the curve only at %(steps)s, but whole for %(full)s and, with %(pruned)s, for pruned trials.
COLUMNS = ("trial_id, idx, params, state, metrics, rungs, search_attrs, failures, error, last_step,"
           " CASE WHEN (%(pruned)s AND state = 'pruned') OR trial_id = %(full)s THEN curve"
           " ELSE (SELECT COALESCE(jsonb_object_agg(key, value), '{}'::jsonb) FROM jsonb_each(curve) WHERE key = ANY(%(steps)s))"
           " END AS curve")


def curve_args(sweep_id: str, steps: Iterable[int | str] | None, full_curve: str | None,
               pruned_curves: bool) -> dict[str, Any]:
    return {"pruned": pruned_curves, "full": full_curve, "steps": sorted(str(s) for s in steps or ()), "sweep": sweep_id}


def record_from_row(r: Row, spec: SweepSpec) -> TrialRecord:
    """A trial row (:data:`COLUMNS`) as the search sees it; smoke trials (negative
    ``idx``) numbered 0, 1, ... by smoke order."""
    return TrialRecord(
        index=r["idx"] if r["idx"] >= 0 else -1 - r["idx"], params=r["params"], state=TrialState(r["state"]),
        values=objective_values(spec, r["metrics"]), curve=_floats(r["curve"]), rungs=_floats(r["rungs"]),
        attrs=r["search_attrs"] or {}, failures=r["failures"], error=r["error"], last_step=max(0, r.get("last_step") or 0),
    )


def split(records: Iterable[tuple[int, TrialRecord]]) -> tuple[list[TrialRecord], list[TrialRecord]]:
    """Regular and smoke records, from ``(stored idx, record)`` pairs in idx order."""
    regular: list[TrialRecord] = []
    smoke: list[TrialRecord] = []
    for idx, record in records:
        (regular if idx >= 0 else smoke).append(record)
    return regular, smoke


def record_of(records: Sequence[TrialRecord], index: int) -> TrialRecord | None:
    """The record of trial ``index`` in ``records`` (in index order, as :func:`history` returns them)."""
    at = bisect.bisect_left(records, index, key=lambda r: r.index)
    return records[at] if at < len(records) and records[at].index == index else None


# Budget units a PBT trial did not train: each exploit resumed from a donor's checkpoint at
# ``from_step`` where the trial itself had reached ``start_step`` (pbt_segments, migration 0007).
# Evaluated only for a pbt sweep (``%(pbt)s``): other sweeps skip the lookup per trial.
INHERITED = ("CASE WHEN %(pbt)s THEN (SELECT COALESCE(sum(p.from_step - p.start_step), 0)::float8 FROM pbt_segments p"
             " WHERE p.trial_id = trials.trial_id AND p.from_step IS NOT NULL) ELSE 0 END")
# The same per exploit, as [[start_step, units inherited], ...], for a trial in flight (:class:`Flying`).
EXPLOITS = ("CASE WHEN %(pbt)s THEN (SELECT jsonb_agg(jsonb_build_array(p.start_step, p.from_step - p.start_step))"
            " FROM pbt_segments p WHERE p.trial_id = trials.trial_id AND p.from_step IS NOT NULL) END")


def usage(conn: Conn, sweep_id: str, spec: SweepSpec, budget_param: str | None = None,
          ended: tuple[str, float | None] | None = None) -> Usage:
    """What the sweep used so far, with the clock read from PostgreSQL (one clock for every planner).

    ``budget_param``: successive halving's, by whose units runs are then
    estimated. ``ended``: ``(trial_id, seconds)`` of a run that has just ended
    but is not recorded yet (a promotion is being decided): it counts as used,
    no longer in flight, and in the estimate. A CPU-only trial counts as one
    GPU: it holds a slot.
    """
    args = {"sweep": sweep_id, "param": budget_param or "", "pbt": spec.strategy.inherits_checkpoints}
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE idx >= 0) AS launched, COALESCE(sum(run_seconds), 0) AS done_s,"
        " COALESCE(array_agg(run_seconds) FILTER (WHERE state = 'completed' AND idx >= 0), '{}') AS durations,"
        " COALESCE(array_agg(ARRAY[run_seconds, (params ->> %(param)s)::float8]) FILTER (WHERE state IN ('completed', 'pruned')"
        "   AND idx >= 0 AND jsonb_typeof(params -> %(param)s) = 'number'), '{}') AS reached,"
        # trial_steps of the trials not in flight: the budget reached, or the highest step reported
        " COALESCE(sum(CASE WHEN jsonb_typeof(params -> %(param)s) IS DISTINCT FROM 'number' THEN greatest(last_step, 0)"
        f"   WHEN started_at IS NULL THEN 0 ELSE (params ->> %(param)s)::float8 - {INHERITED} END)"
        "   FILTER (WHERE state NOT IN ('pending', 'queued', 'running')), 0)::float8 AS steps,"
        " COALESCE(array_agg(greatest(last_step, 0)::float8) FILTER (WHERE state = 'completed' AND idx >= 0), '{}') AS reported"
        " FROM trials WHERE sweep_id = %(sweep)s", args,
    ).fetchone()
    assert row is not None
    flying = conn.execute(
        "SELECT trial_id, run_seconds, rungs, CASE WHEN jsonb_typeof(params -> %(param)s) = 'number'"
        "   THEN (params ->> %(param)s)::float8 END AS budget,"
        " CASE WHEN state = 'running' AND run_started_at IS NOT NULL"
        f"   THEN extract(epoch FROM now() - run_started_at)::float8 ELSE 0 END AS ran, last_step, {EXPLOITS} AS exploits"
        " FROM trials WHERE sweep_id = %(sweep)s AND state IN ('pending', 'queued', 'running')", args,
    ).fetchall()
    elapsed = _running_seconds(conn, sweep_id) if spec.budget is not None and spec.budget.wall_time else 0.0
    return usage_of(spec, budget_param, ended, Totals(int(row["launched"]), float(row["done_s"]),
                                                      [float(x) for x in row["durations"]],
                                                      [(float(s), float(u)) for s, u in row["reached"]], elapsed,
                                                      float(row["steps"]), [float(x) for x in row["reported"]]),
                    [Flying(r["trial_id"], float(r["run_seconds"]), _floats(r["rungs"]), r["budget"], float(r["ran"]),
                            float(r["last_step"]), [(float(a), float(b)) for a, b in r["exploits"] or ()])
                     for r in flying])


@dataclass(frozen=True)
class Totals:
    """What a sweep's trials add up to, for :func:`usage_of`."""

    launched: int  # regular trials
    done_seconds: float  # run seconds of every trial
    durations: list[float]  # run seconds of each completed regular trial
    reached: list[tuple[float, float]]  # (run seconds, budget) of completed and pruned regular trials with a numeric budget
    elapsed: float  # seconds the sweep has been running (0 unless wall_time is capped)
    steps: float = 0.0  # training steps of every trial not in flight (:func:`.search.trial_steps`)
    reported: list[float] = field(default_factory=list)  # the highest step each completed regular trial reported


@dataclass(frozen=True)
class Flying:
    """A trial in flight, for :func:`usage_of`."""

    trial_id: str
    run_seconds: float  # over its earlier runs
    rungs: dict[int, float]
    budget: float | None  # its budget parameter, when numeric
    ran: float  # seconds its current run has been running
    last_step: float = 0.0  # the highest step it reported so far
    exploits: list[tuple[float, float]] = field(default_factory=list)  # PBT: (budget it exploited at, units copied)

    def inherited(self, reached: float) -> tuple[float, float]:
        """Budget units its exploits copied rather than trained: ``(before, now)``, those of
        the segments that ended below ``reached`` and that of the segment in flight."""
        before = sum(units for start, units in self.exploits if start < reached)
        return before, sum(units for _, units in self.exploits) - before


def usage_of(spec: SweepSpec, budget_param: str | None, ended: tuple[str, float | None] | None, totals: Totals,
             flying: list[Flying]) -> Usage:
    """The :class:`Usage` the adapters' totals and trials in flight make (see :func:`usage`)."""
    gpus = max(1, spec.resources.gpus)
    used = totals.done_seconds
    reached = list(totals.reached)
    runs: list[tuple[float | None, float]] = []  # in flight: (budget units its current run trains or None, seconds run)
    steps = totals.steps
    stepping: list[tuple[float, float | None]] = []  # in flight: (steps trained, steps its run has left or None)
    for f in flying:
        ran = f.ran
        budget = f.budget if budget_param is not None else None
        if ended is not None and f.trial_id == ended[0]:
            ran = ran if ended[1] is None else ended[1]
            if f.budget is not None:
                reached.append((f.run_seconds + ran, float(f.budget)))
            used += ran
            trained = trial_steps(budget, max(f.rungs, default=0), f.last_step, in_flight=False, started=True)[0]
            steps += trained - sum(f.inherited(trained))
            continue
        used += ran
        units = None if f.budget is None else float(f.budget) - max(f.rungs, default=0)
        runs.append((units, ran))
        trained, left = trial_steps(budget, max(f.rungs, default=0), f.last_step, in_flight=True, started=True)
        before, now = f.inherited(trained)  # a segment that resumed from a donor trains from the donor's step
        trained, left = trained - before, None if left is None else max(0.0, left - now)
        steps += trained
        stepping.append((trained, left))
    per_unit = estimate_unit_seconds(reached) if budget_param is not None else None
    per_trial = estimate_trial_seconds(totals.durations)
    expected = [(per_unit * units if per_unit is not None and units is not None else per_trial, ran) for units, ran in runs]
    per_trial_steps = estimate_trial_steps(totals.reported) if budget_param is None else None
    return Usage(launched=totals.launched, gpu_seconds=gpus * used, elapsed_seconds=totals.elapsed,
                 trial_seconds=per_trial, gpus=gpus, committed_gpu_seconds=committed(expected, gpus),
                 unit_seconds=per_unit, steps=steps, committed_steps=committed_steps(stepping, per_trial_steps),
                 trial_steps=per_trial_steps)


def _running_seconds(conn: Conn, sweep_id: str) -> float:
    """Seconds the sweep has been running: the length of the union of its trials'
    lifetimes (written to ended, or to now while in flight). A running sweep
    always has a trial in flight, so only the time it spent ended is left out."""
    row = conn.execute(
        "SELECT COALESCE(sum(GREATEST(0, extract(epoch FROM e - GREATEST(s, COALESCE(reach, s))))), 0)::float8 AS seconds"
        " FROM (SELECT s, e, max(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach"
        "   FROM (SELECT created_at AS s, CASE WHEN state IN ('pending', 'queued', 'running') THEN now()"
        "     ELSE GREATEST(created_at, COALESCE(finished_at, created_at)) END AS e"
        "     FROM trials WHERE sweep_id = %s) lifetimes) ordered",
        (sweep_id,),
    ).fetchone()
    return float(row["seconds"]) if row else 0.0
