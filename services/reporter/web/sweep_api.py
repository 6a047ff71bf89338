"""The sweep page's further panels as JSON: seeds (:mod:`.seeds`), the agents'
timeline (:mod:`.timeline`), cost (:mod:`.spend`), resource use (the agent's
``sys/`` samples); docs/dashboard.md gives each answer's shape. Each handler
is a couple of set-based queries (:mod:`.queries`) and a pure function.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from spotsweep.services.reporter.web import queries, seeds, spend, timeline
from spotsweep.services.reporter.web.api import Api, _int, json_response, points_cap
from spotsweep.services.reporter.web.downsample import downsample

SYS_PREFIX = "sys/"  # the agent's resource samples (services/agent/resources.py)
RESOURCE_TRIALS, RESOURCE_TRIALS_LIMIT = 12, 200
TIMELINE_RUNS, TIMELINE_RUNS_LIMIT = 20_000, 100_000
SEED_CONFIGS, SEED_CONFIGS_LIMIT = 8, 50
SEED_TABLE, SEED_TABLE_LIMIT = 500, 1_000_000


class SweepPanels:
    """Handlers over the database of ``api`` (see the module's docstring)."""

    def __init__(self, api: Api) -> None:
        self.api, self.db = api, api.db

    # -- sync bodies, run in the thread pool --------------------------------------

    def seeds_body(self, sweep_id: str, metric: str | None, configs: int, max_points: int,
                   table: int = SEED_TABLE) -> dict[str, Any]:
        row = self.api._sweep(sweep_id)
        metric = metric or row["metric"]
        mode = row["mode"] if metric == row["metric"] else "min"
        repeats = int(((row.get("spec") or {}).get("repeats")) or 1)
        with self.db.transaction() as conn:
            groups = queries.seed_groups(conn, sweep_id, metric) if repeats > 1 else []
            body, found = seeds.summary_json(groups, metric, mode, repeats, table)
            top = found[:configs]
            ids = [t for c in top for t in c.trial_ids]
            curves = queries.curves(conn, ids, metric) if ids else {}
        body["curves"] = [{"label": seeds.label(seeds.params_of(c)), "trials": list(c.trial_ids),
                           "points": seeds.mean_curve([[(p[0], p[1]) for p in curves[t]] for t in c.trial_ids], max_points)}
                          for c in top]
        return body

    def timeline_body(self, sweep_id: str, limit: int) -> dict[str, Any]:
        self.api._sweep(sweep_id)
        with self.db.transaction() as conn:
            rows = queries.runs(conn, sweep_id)
        return timeline.as_json(timeline.runs(rows), datetime.now(timezone.utc), limit)

    def cost_body(self, sweep_id: str) -> dict[str, Any]:
        row = self.api._sweep(sweep_id)
        with self.db.transaction() as conn:
            total, finished = queries.spending(conn, sweep_id)
        return spend.cost_json(row.get("spec"), total, finished)

    def resources_body(self, sweep_id: str, wanted: list[str], limit: int, max_points: int) -> dict[str, Any]:
        self.api._sweep(sweep_id)
        with self.db.transaction() as conn:
            if wanted:
                chosen = queries.trials(conn, sweep_id, only=wanted)
                if missing := sorted(set(wanted) - {r["trial_id"] for r in chosen}):
                    raise HTTPException(404, f"no trial {missing[0]!r} in sweep {sweep_id!r}")
            else:
                chosen = queries.resource_trials(conn, sweep_id, limit)
            chosen = chosen[:limit]
            rows = queries.samples(conn, [r["trial_id"] for r in chosen], SYS_PREFIX)
        series: dict[str, dict[str, list[tuple[float, float | None]]]] = {r["trial_id"]: {} for r in chosen}
        for r in rows:
            series[r["trial_id"]].setdefault(r["name"], []).append((r["step"], r["value"]))
        names = sorted({name for by_name in series.values() for name in by_name})
        return {"metrics": names, "max_points": max_points,
                "trials": [{"trial_id": r["trial_id"], "trial_name": r["trial_name"], "state": r["state"],
                            "series": {name: [[s, v] for s, v in downsample(points, max_points)]
                                       for name, points in series[r["trial_id"]].items()}}
                           for r in chosen]}

    # -- ASGI endpoints ------------------------------------------------------------

    async def seeds(self, request: Request) -> Response:
        configs = _int(request, "configs", SEED_CONFIGS, 1, SEED_CONFIGS_LIMIT)
        max_points = _int(request, "max_points", 300, 2, 10_000)
        table = _int(request, "table", SEED_TABLE, 1, SEED_TABLE_LIMIT)
        return json_response(await run_in_threadpool(self.seeds_body, request.path_params["sweep_id"],
                                                     request.query_params.get("metric"), configs, max_points, table))

    async def timeline(self, request: Request) -> Response:
        limit = _int(request, "limit", TIMELINE_RUNS, 1, TIMELINE_RUNS_LIMIT)
        return json_response(await run_in_threadpool(self.timeline_body, request.path_params["sweep_id"], limit))

    async def cost(self, request: Request) -> Response:
        return json_response(await run_in_threadpool(self.cost_body, request.path_params["sweep_id"]))

    async def resources(self, request: Request) -> Response:
        limit = _int(request, "limit", RESOURCE_TRIALS, 1, RESOURCE_TRIALS_LIMIT)
        max_points = _int(request, "max_points", 300, 2, 10_000)
        points_cap(limit, max_points)
        return json_response(await run_in_threadpool(self.resources_body, request.path_params["sweep_id"],
                                                     request.query_params.getlist("trial"), limit, max_points))
