"""The search state the planner reads from PostgreSQL, for the pure decisions
in :mod:`.search`: each trial as a :class:`TrialRecord`, and what a sweep has
used so far as a :class:`Usage`.

Everything a decision depends on is in the database (params, states, final
metrics, the values recorded at each rung, the objective's curve, the
sampler's attributes), so a restarted planner decides as the one before it.
Curves can be long: a caller asks only for the steps it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotsweep.services.planner.search import TrialRecord, Usage, estimate_trial_seconds, expected_remaining
from spotsweep.services.planner.search.history import objective_values
from spotsweep.shared.db import Conn
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.states import TrialState


def _floats(data: dict[str, Any] | None) -> dict[int, float]:
    # jsonb keys are strings; non-finite values are stored as "NaN"/"Infinity", which float() reads
    return {int(k): float(v) for k, v in (data or {}).items()}


def history(conn: Conn, sweep_id: str, spec: SweepSpec, *, steps: Sequence[int] | None = None,
            full_curve: str | None = None, all_curves: bool = False) -> tuple[list[TrialRecord], list[TrialRecord]]:
    """The sweep's regular trials and its smoke trials (numbered 0, 1, ... by smoke order).

    Curves: every point for ``all_curves`` (model-based samplers want pruned
    trials' curves), else only at ``steps`` (median stopping compares one
    step), plus the whole curve of trial ``full_curve``.
    """
    rows = conn.execute(
        "SELECT trial_id, idx, params, state, metrics, rungs, search_attrs, failures, error,"
        " CASE WHEN %(all)s OR trial_id = %(full)s THEN curve"
        " ELSE (SELECT COALESCE(jsonb_object_agg(key, value), '{}'::jsonb) FROM jsonb_each(curve) WHERE key = ANY(%(steps)s))"
        " END AS curve"
        " FROM trials WHERE sweep_id = %(sweep)s ORDER BY idx",
        {"all": all_curves, "full": full_curve, "steps": [str(s) for s in steps or ()], "sweep": sweep_id},
    ).fetchall()
    regular: list[TrialRecord] = []
    smoke: list[TrialRecord] = []
    for r in rows:
        record = TrialRecord(
            index=r["idx"] if r["idx"] >= 0 else -1 - r["idx"], params=r["params"], state=TrialState(r["state"]),
            values=objective_values(spec, r["metrics"]), curve=_floats(r["curve"]), rungs=_floats(r["rungs"]),
            attrs=r["search_attrs"] or {}, failures=r["failures"], error=r["error"],
        )
        (regular if r["idx"] >= 0 else smoke).append(record)
    return regular, smoke


def record_of(records: Sequence[TrialRecord], index: int) -> TrialRecord | None:
    return next((r for r in records if r.index == index), None)


def usage(conn: Conn, sweep_id: str, spec: SweepSpec) -> Usage:
    """What the sweep used so far, with the clock read from PostgreSQL (one clock for every planner).

    A CPU-only trial (``resources.gpus: 0``) counts as one GPU: it holds a slot.
    """
    gpus = max(1, spec.resources.gpus)
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE t.idx >= 0) AS launched,"
        " COALESCE(sum(t.run_seconds), 0) AS done_s,"
        " COALESCE(array_agg(extract(epoch FROM now() - t.run_started_at)::float8)"
        "   FILTER (WHERE t.state = 'running' AND t.run_started_at IS NOT NULL), '{}') AS running_for,"
        " count(*) FILTER (WHERE t.state IN ('pending', 'queued')) AS waiting,"
        " COALESCE(array_agg(t.run_seconds) FILTER (WHERE t.state = 'completed' AND t.idx >= 0), '{}') AS durations,"
        " (SELECT extract(epoch FROM now() - s.created_at)::float8 FROM sweeps s WHERE s.sweep_id = %(sweep)s) AS elapsed"
        " FROM trials t WHERE t.sweep_id = %(sweep)s",
        {"sweep": sweep_id},
    ).fetchone()
    assert row is not None
    running_for = [float(x) for x in row["running_for"]]
    per_trial = estimate_trial_seconds([float(x) for x in row["durations"]])
    return Usage(
        launched=int(row["launched"]),
        gpu_seconds=gpus * (float(row["done_s"]) + sum(running_for)),
        elapsed_seconds=float(row["elapsed"] or 0.0),
        trial_seconds=per_trial,
        gpus=gpus,
        committed_gpu_seconds=expected_remaining(per_trial, running_for, int(row["waiting"]), gpus),
    )
