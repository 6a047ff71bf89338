"""Rows as the JSON API returns them: ranked (a diverged trial is never the
best), strict JSON a browser can parse (non-finite numbers as the strings the
database stores), one shape. Pure functions over the rows :mod:`.queries`
returns, so the ranking rules and the JSON contract are tested without a database.
"""

from __future__ import annotations

import json
import math
import shlex
from datetime import datetime
from typing import Any

from spotsweep.services.reporter.web.spend import unit_of
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.naming import render_argv
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.nonfinite import finite, json_safe

_LATER = {"running": 2, "queued": 3, "pending": 3, "pruned": 4, "failed": 5, "cancelled": 6}


def _order(state: str, value: float | None, trial_id: str, mode: str) -> tuple[int, float, str]:
    """Sort key, best first: completed with a finite objective (by value),
    completed without one (NaN, missing), then running, queued, pruned,
    failed, cancelled."""
    if state != "completed":
        return (_LATER.get(state, 7), 0.0, trial_id)
    if value is None:
        return (1, 0.0, trial_id)
    return (0, value if mode == "min" else -value, trial_id)


def ranked(rows: list[dict[str, Any]], metric: str, mode: str) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: _order(r["state"], finite((r.get("metrics") or {}).get(metric)),
                                             r["trial_id"], mode))


def trial_json(row: dict[str, Any]) -> dict[str, Any]:
    """One trial as ``GET /api/sweeps/<id>/trials`` lists it (less its rank)."""
    return {
        "trial_id": row["trial_id"],
        "trial_name": row["trial_name"],
        "state": row["state"],
        "params": row.get("params") or {},
        "metrics": row.get("metrics") or {},
        "attempts": row.get("attempts"),
        "preemptions": row.get("preemptions"),
        "failures": row.get("failures"),
        "flags": list(row.get("flags") or []),
        "warnings": list(row.get("warnings") or []),
        "smoke": bool(row.get("smoke")),
        "rank": None,
        "agent": row.get("agent"),
        "run_seconds": row.get("run_seconds"),
        "started_at": row.get("started_at"),
        "finished_at": row.get("finished_at"),
    }


def ranked_bodies(rows: list[dict[str, Any]], mode: str) -> bytes:
    """The trial list as one JSON array from :func:`.queries.listed_json`
    rows (each a JSON object as text), best first as :func:`ranked` orders
    them, each with its ``rank`` appended (null without a finite objective);
    smoke trials last, never ranked (as ``spotsweep report`` leaves them out)."""
    parts = []
    for i, row in enumerate(sorted(rows, key=lambda r: (bool(r.get("smoke")),
                                                        _order(r["state"], r["objective"], r["trial_id"], mode))), 1):
        rank = i if row["state"] == "completed" and row["objective"] is not None and not row.get("smoke") else "null"
        parts.append(f'{row["body"][:-1]}, "rank" : {rank}}}')
    return ("[" + ",".join(parts) + "]").encode()


def sweep_json(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A :func:`.queries.sweep` row as the API shows it, with its ``age`` at ``now``."""
    return {
        "sweep_id": row["sweep_id"],
        "name": row["name"],
        "state": row["state"],
        "counts": row["counts"],
        "total": sum(row["counts"].values()),
        "metric": row["metric"],
        "mode": row["mode"],
        "best": row["best"],
        "created_at": row["created_at"],
        "finished_at": row["finished_at"],
        "age": age(row["created_at"], now),
        "error": row.get("error"),
        "note": row.get("note"),
        "gpu_hours": row.get("gpu_hours"),
        "unit": unit_of(row.get("spec")),  # of gpu_hours: GPU-hours, or slot-hours for a CPU sweep
        "cost": row.get("cost"),
        "on_demand_cost": row.get("on_demand_cost"),
    }


def dumps(value: Any) -> bytes:
    """Strict JSON (``allow_nan=False``): datetimes as ISO 8601, non-finite
    floats as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    try:  # the common case, in one pass: nothing non-finite (the database keeps metrics' as strings)
        return json.dumps(value, allow_nan=False, separators=(",", ":"), default=_default).encode()
    except ValueError:
        return json.dumps(json_safe(value), allow_nan=False, separators=(",", ":"), default=_default).encode()


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


_NONFINITE = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def magnitude(value: Any) -> str:
    """A value as the pages print it (static/common.js ``SS.fmt`` alike):
    whole numbers as they are, others to 4 significant digits, in e-notation
    below 0.001 or from a million (``3e-4``, ``9408``, ``1.235e6``); the
    pages put the exact value in the hover text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _NONFINITE.get(value, str(value)) if isinstance(value, str) else str(value)
    if not math.isfinite(value):
        return {math.inf: "inf", -math.inf: "-inf"}.get(value, "nan")
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    text = f"{value:.3e}" if value and (abs(value) < 1e-3 or abs(value) >= 1e6) else f"{value:.4g}"
    mantissa, _, exp = text.partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa + (f"e{int(exp)}" if exp else "")


def shown_spec(spec: Any) -> Any:
    """The spec as the sweep page shows it: its ``env`` values hidden (a
    secret a sweep needs goes there, docs/security.md), their names kept."""
    if not isinstance(spec, dict) or not isinstance(spec.get("env"), dict):
        return spec
    return {**spec, "env": {k: "(hidden)" for k in spec["env"]}}


def command_line(spec: Any, row: dict[str, Any]) -> str | None:
    """The trial's command line, as the planner renders it for the agent
    (``render_argv`` with ``index`` and ``trial_name``), shell-quoted; None
    when the stored spec cannot be read."""
    try:
        command = parse_spec(spec).command
        index = int(str(row["trial_id"]).rsplit(".", 1)[-1])
        argv = render_argv(command, row.get("params") or {}, {"index": index, "trial_name": row["trial_name"]})
    except (SpotsweepError, TypeError, ValueError, KeyError):
        return None
    return shlex.join(argv)


def age(since: datetime | None, now: datetime) -> str:
    """``3d 4h``, ``5h 2m``, ``42s``: how long ago, for people."""
    if since is None:
        return ""
    seconds = max(0, int((now - since).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"
