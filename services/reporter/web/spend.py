"""What a sweep cost, against what the same GPU-hours cost on demand: GPU-hours
as ``spotsweep report`` adds them up (:func:`~spotsweep.services.reporter.summary.cost_of`),
priced with the spec's ``pricing``, and their running total over finish times.
Pure functions over what :func:`.queries.spending` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spotsweep.services.reporter.summary import cost_of

CURVE_POINTS = 300


def unit_of(spec: Mapping[str, Any] | None) -> str:
    """What an hour of a trial's slot is called: ``GPU-hours``, or ``slot-hours`` for a CPU sweep (``gpus: 0``)."""
    try:
        return "slot-hours" if int(((spec or {}).get("resources") or {}).get("gpus", 1)) == 0 else "GPU-hours"
    except (TypeError, ValueError):
        return "GPU-hours"


def gpus_of(spec: Mapping[str, Any] | None) -> int:
    try:
        return max(1, int(((spec or {}).get("resources") or {}).get("gpus", 1)))
    except (TypeError, ValueError):
        return 1


def pricing_of(spec: Mapping[str, Any] | None) -> dict[str, float | None] | None:
    pricing = (spec or {}).get("pricing")
    if not isinstance(pricing, Mapping) or pricing.get("gpu_hour") is None:
        return None
    on_demand = pricing.get("on_demand_gpu_hour")
    return {"gpu_hour": float(pricing["gpu_hour"]), "on_demand_gpu_hour": None if on_demand is None else float(on_demand)}


def _thinned(rows: Sequence[Any], most: int) -> list[Any]:
    """At most ``most`` of ``rows``, evenly spaced, the last always kept."""
    if len(rows) <= most:
        return list(rows)
    every = len(rows) / most
    picked = [rows[int(i * every)] for i in range(most - 1)]
    return [*picked, rows[-1]]


def cost_json(spec: Mapping[str, Any] | None, total_seconds: float, finished: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``GET /api/sweeps/<id>/cost``'s body: totals (every trial, running
    ones' time so far included) and the running total over finish times."""
    gpus, pricing = gpus_of(spec), pricing_of(spec)
    total = cost_of([{"run_seconds": total_seconds}], gpus, pricing)
    saving = None if total.cost is None or total.on_demand is None else total.on_demand - total.cost
    curve, seconds = [], 0.0
    for row in finished:
        seconds += float(row["run_seconds"] or 0.0)
        curve.append((row["finished_at"], seconds))
    points = []
    for time, secs in _thinned(curve, CURVE_POINTS):
        hours = secs * gpus / 3600
        points.append({"time": time, "gpu_hours": hours,
                       "cost": None if pricing is None else hours * pricing["gpu_hour"],
                       "on_demand": None if pricing is None or pricing["on_demand_gpu_hour"] is None
                       else hours * pricing["on_demand_gpu_hour"]})
    body: dict[str, Any] = {"gpus": gpus, "unit": unit_of(spec), "gpu_hours": total.gpu_hours, "pricing": pricing, "cost": total.cost,
                            "on_demand": total.on_demand, "saving": saving,
                            "saving_share": None if saving is None or not total.on_demand else saving / total.on_demand,
                            "curve": points}
    if pricing is None:
        body["reason"] = "no pricing in the spec: add pricing: {gpu_hour: ..., on_demand_gpu_hour: ...} to see cost"
    elif pricing["on_demand_gpu_hour"] is None:
        body["reason"] = "no pricing.on_demand_gpu_hour in the spec: nothing to compare the spot cost with"
    return body
