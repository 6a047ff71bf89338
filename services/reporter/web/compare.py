"""Sweeps side by side: ``/compare?sweeps=A,B[,...]`` and ``GET /api/compare``
(docs/dashboard.md): each sweep (by id, or the newest of that name) with its
best trials as its leaderboard ranks them, their params, objective and curves
(:mod:`.curves`); the params that differ first (:func:`differing`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from spotsweep.services.reporter.web import curves, present, queries
from spotsweep.services.reporter.web.api import Api, _int, json_response
from spotsweep.shared.nonfinite import finite

SWEEPS_LIMIT = 12
TOP, TOP_LIMIT = 1, 10
POINTS = 1000


def requested(request: Request) -> list[str]:
    """The sweeps asked for, in order, without repeats: ``?sweeps=a,b`` (or ``sweeps`` given more than once)."""
    names = [n.strip() for value in request.query_params.getlist("sweeps") for n in value.split(",")]
    names = list(dict.fromkeys(n for n in names if n))
    if len(names) < 2:
        raise HTTPException(400, f"give two or more sweeps (ids or names): ?sweeps=A,B (got {len(names)})")
    if len(names) > SWEEPS_LIMIT:
        raise HTTPException(400, f"at most {SWEEPS_LIMIT} sweeps at once (got {len(names)})")
    return names


def differing(trials: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Every param name of ``trials``, those whose values differ (or that some trials lack)
    first, then by name; and the differing ones."""
    names = sorted({k for t in trials for k in t["params"]})
    differs = [k for k in names if len({json.dumps(t["params"].get(k), sort_keys=True) for t in trials}) > 1]
    return sorted(names, key=lambda k: (k not in differs, k)), differs


class Compare:
    """The comparison over ``api``'s database (see the module's docstring)."""

    def __init__(self, api: Api) -> None:
        self.db = api.db

    def resolve(self, names: list[str], conn: Any = None) -> list[dict[str, Any]]:
        """The sweeps' headers, each once, in order; 404 naming the first that is not there."""
        if conn is None:
            with self.db.transaction() as conn:
                return self.resolve(names, conn)
        rows: dict[str, dict[str, Any]] = {}
        for name in names:
            row = queries.find_sweep(conn, name)
            if row is None:
                raise HTTPException(404, f"no sweep with id or name {name!r}")
            rows.setdefault(row["sweep_id"], row)
        return list(rows.values())

    def body(self, names: list[str], top: int, max_points: int = POINTS) -> dict[str, Any]:
        with self.db.transaction() as conn:
            out = [self._sweep(conn, row, top, max_points) for row in self.resolve(names, conn)]
        params, differs = differing([t for s in out for t in s["trials"]])
        return {"sweeps": out, "params": params, "differs": differs}

    def _sweep(self, conn: Any, row: dict[str, Any], top: int, max_points: int) -> dict[str, Any]:
        """One sweep's header and its best ``top`` trials, each with its params, value and curve."""
        metric, mode = row["metric"], row["mode"]
        ranked = present.ranked(queries.ranking(conn, row["sweep_id"], metric), metric, mode)
        best = [r for r in ranked if r["state"] == "completed" and finite(r["metrics"].get(metric)) is not None][:top]
        ids = [r["trial_id"] for r in best]
        full = {r["trial_id"]: r for r in queries.trials(conn, row["sweep_id"], only=ids)} if ids else {}
        tokens = curves.tokens_metric(sorted({k for r in full.values() for k in (r["metrics"] or {})}))
        rows, starts = queries.curves(conn, ids, metric), queries.starts(conn, ids)
        counted = queries.curves(conn, ids, tokens) if tokens and ids else {}
        trials = [{"trial_id": t, "trial_name": full[t]["trial_name"], "params": full[t]["params"] or {},
                   "value": full[t]["metrics"].get(metric),
                   **curves.trial_curve(rows[t], starts.get(t), {p[0]: p[1] for p in counted[t]} if tokens else None,
                                        max_points)} for t in ids]
        return {"sweep_id": row["sweep_id"], "name": row["name"], "state": row["state"], "metric": metric, "mode": mode,
                "best": row["best"], "tokens_metric": tokens, "trials": trials,
                "reason": None if trials else "no completed trial with a finite objective yet"}

    async def api_answer(self, request: Request) -> Response:
        top = _int(request, "top", TOP, 1, TOP_LIMIT)
        return json_response(await run_in_threadpool(self.body, requested(request), top))
