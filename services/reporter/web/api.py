"""The JSON API: the same data the pages draw, for scripts and the pages' own polling.

Each handler runs its queries in Starlette's thread pool (the database
layer is synchronous, one connection per thread). Unknown ids answer 404
with ``{"error": ...}``; bodies are strict JSON (:func:`.present.dumps`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from spotsweep.services.reporter.web import importance as imp
from spotsweep.services.reporter.web import curves, present, queries, timeline, trial_api
from spotsweep.services.reporter.web.spend import gpus_of, unit_of
from spotsweep.services.reporter.web.trial_api import TrialArtifacts
from spotsweep.shared.artifacts import ArtifactStore
from spotsweep.shared.db import Database
from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec import parse_spec

MAX_POINTS, MAX_POINTS_LIMIT = 500, 10_000
CURVES, CURVES_LIMIT = 50, 1000
POINTS_LIMIT = 1_000_000  # curves x points a request may ask for: at most ~20 MB of JSON


def points_cap(limit: int, max_points: int) -> None:
    """400 when ``limit`` curves of ``max_points`` points would pass :data:`POINTS_LIMIT`."""
    if limit * max_points > POINTS_LIMIT:
        raise HTTPException(400, f"limit x max_points must be at most {POINTS_LIMIT:,} (got {limit} x {max_points})")


def json_response(body: Any, status: int = 200) -> Response:
    return Response(present.dumps(body), status_code=status, media_type="application/json")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer (got {raw!r})") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be between {low} and {high} (got {value})")
    return value


class Api:
    """Handlers over one database; ``importance`` results are cached per
    sweep state (they change only when a trial completes)."""

    def __init__(self, db: Database, store: ArtifactStore | None = None) -> None:
        self.db = db
        self.artifacts = TrialArtifacts(store)
        self._importance: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()

    def _sweep(self, sweep_id: str) -> dict[str, Any]:
        with self.db.transaction() as conn:
            row = queries.sweep(conn, sweep_id)
        if row is None:
            raise HTTPException(404, f"no sweep with id {sweep_id!r}")
        return row

    # -- sync bodies, run in the thread pool --------------------------------------

    def sweeps_body(self) -> list[dict[str, Any]]:
        now = datetime.now(timezone.utc)
        with self.db.transaction() as conn:
            rows = queries.sweeps(conn)
        return [present.sweep_json(r, now) for r in rows]

    def sweep_body(self, sweep_id: str) -> dict[str, Any]:
        """One sweep: its header, counts, best, metric names and space (for the page's charts)."""
        row = self._sweep(sweep_id)
        with self.db.transaction() as conn:
            sample = [r["trial_id"] for r in conn.execute(
                "SELECT trial_id FROM trial_results WHERE sweep_id = %s AND state = 'running' LIMIT 20", (sweep_id,))]
            metrics = queries.metric_names(conn, sweep_id, sample)
        body = present.sweep_json(row, datetime.now(timezone.utc))
        return {**body, "metrics": metrics, "tokens_metric": curves.tokens_metric(metrics),
                "space": space_json(row.get("spec")), "spec": present.shown_spec(row.get("spec"))}

    def trials_json(self, sweep_id: str) -> bytes:
        """The trial list, best first, as JSON built by PostgreSQL (:func:`.queries.listed_json`)."""
        row = self._sweep(sweep_id)
        with self.db.transaction() as conn:
            rows = queries.listed_json(conn, sweep_id, row["metric"])
        return present.ranked_bodies(rows, row["mode"])

    def trials_body(self, sweep_id: str) -> list[dict[str, Any]]:
        return json.loads(self.trials_json(sweep_id))  # type: ignore[no-any-return]

    def curves_body(self, sweep_id: str, metric: str, max_points: int, limit: int, wanted: list[str],
                    tokens: str | None = None) -> dict[str, Any]:
        """The best ``limit`` trials' (or ``wanted``'s) curves of ``metric`` with their
        seconds and, given the ``tokens`` metric, tokens beside each point (:mod:`.curves`)."""
        row = self._sweep(sweep_id)
        with self.db.transaction() as conn:
            if wanted:
                chosen = queries.trials(conn, sweep_id, only=wanted)
            else:
                chosen = present.ranked(queries.ranking(conn, sweep_id, row["metric"]), row["metric"], row["mode"])
            ids = [r["trial_id"] for r in chosen[:limit]]
            rows, starts = queries.curves(conn, ids, metric), queries.starts(conn, ids)
            counted = queries.curves(conn, ids, tokens) if tokens else {}
        if wanted and (missing := sorted(set(wanted) - {r["trial_id"] for r in chosen})):
            raise HTTPException(404, f"no trial {missing[0]!r} in sweep {sweep_id!r}")
        out = [{"trial_id": r["trial_id"], "trial_name": r["trial_name"], "state": r["state"],
                **curves.trial_curve(rows[r["trial_id"]], starts.get(r["trial_id"]),
                                     {p[0]: p[1] for p in counted[r["trial_id"]]} if tokens else None, max_points)}
               for r in chosen[:limit]]
        return {"metric": metric, "max_points": max_points, "tokens_metric": tokens, "trials": out}

    def best_body(self, sweep_id: str, metric: str | None) -> dict[str, Any]:
        row = self._sweep(sweep_id)
        metric = metric or row["metric"]
        with self.db.transaction() as conn:
            rows = queries.best_so_far(conn, sweep_id, metric, row["mode"] if metric == row["metric"] else "min")
        gpus = gpus_of(row.get("spec"))
        return {"metric": metric, "mode": row["mode"], "unit": unit_of(row.get("spec")),
                "points": [{"time": r["finished_at"], "trial_id": r["trial_id"], "trial_name": r["trial_name"],
                            "value": r["value"], "gpu_hours": float(r["run_s"] or 0.0) * gpus / 3600} for r in rows]}

    def importance_body(self, sweep_id: str, metric: str | None, method: str) -> dict[str, Any]:
        row = self._sweep(sweep_id)
        metric = metric or row["metric"]
        mode = row["mode"] if metric == row["metric"] else "min"
        with self.db.transaction() as conn:  # the cache's key first: one aggregate, no rows
            seen = conn.execute("SELECT count(*) AS n, max(finished_at) AS last FROM trial_results"
                                " WHERE sweep_id = %s AND state = 'completed'", (sweep_id,)).fetchone()
        key = (sweep_id, metric, method, seen["n"] if seen else 0, seen["last"] if seen else None)
        if key in self._importance:
            return self._importance[key]
        with self.db.transaction() as conn:  # what importance reads: the params and this metric only
            rows = conn.execute("SELECT trial_id, state, params, jsonb_build_object(%s::text, metrics->%s) AS metrics, smoke"
                                " FROM trial_results WHERE sweep_id = %s AND state = 'completed'",
                                (metric, metric, sweep_id)).fetchall()
        try:
            space = parse_spec(row["spec"]).space
        except (SpecError, TypeError) as e:
            return imp.as_json(imp.Importance(metric, method=method, reason=f"the sweep's stored spec cannot be read: {e}"))
        body = imp.as_json(imp.importance(space, rows, metric, mode, method))
        self._importance[key] = body
        while len(self._importance) > 64:
            self._importance.popitem(last=False)
        return body

    def trial_body(self, sweep_id: str, trial_id: str) -> dict[str, Any]:
        sweep = self._sweep(sweep_id)
        with self.db.transaction() as conn:
            row = queries.trial(conn, sweep_id, trial_id)
            if row is None:
                raise HTTPException(404, f"no trial {trial_id!r} in sweep {sweep_id!r}")
            attempts = queries.attempts(conn, trial_id)
            names = queries.trial_metric_names(conn, trial_id)
            journal = trial_api.events(conn, trial_id)
            latest = queries.latest(conn, trial_id) if row["state"] == "running" else {}
            lost = [r.note for r in timeline.runs(queries.runs(conn, sweep_id, trial_id)) if r.outcome == "lost"]
        return {**present.trial_json(row), "error": row.get("error"), "sweep_id": sweep_id,
                "agent": row.get("agent"), "losses": row.get("losses"), "metric_names": names, "attempt_points": attempts,
                "events": journal, "lost_runs": lost, "latest": latest,
                "command": present.command_line(sweep.get("spec"), row), **self.artifacts.body(sweep_id, trial_id)}

    # -- ASGI endpoints ------------------------------------------------------------

    async def sweeps(self, request: Request) -> Response:
        return json_response(await run_in_threadpool(self.sweeps_body))

    async def sweep(self, request: Request) -> Response:
        return json_response(await run_in_threadpool(self.sweep_body, request.path_params["sweep_id"]))

    async def trials(self, request: Request) -> Response:
        body = await run_in_threadpool(self.trials_json, request.path_params["sweep_id"])
        return Response(body, media_type="application/json")

    async def curves(self, request: Request) -> Response:
        metric = request.query_params.get("metric")
        if not metric:
            raise HTTPException(400, "give the metric: ?metric=NAME")
        max_points = _int(request, "max_points", MAX_POINTS, 2, MAX_POINTS_LIMIT)
        limit = _int(request, "limit", CURVES, 1, CURVES_LIMIT)
        wanted = request.query_params.getlist("trial")
        points_cap(limit, max_points)
        return json_response(await run_in_threadpool(self.curves_body, request.path_params["sweep_id"], metric,
                                                     max_points, limit, wanted, request.query_params.get("tokens")))

    async def best(self, request: Request) -> Response:
        return json_response(await run_in_threadpool(self.best_body, request.path_params["sweep_id"],
                                                     request.query_params.get("metric")))

    async def importance(self, request: Request) -> Response:
        method = request.query_params.get("method", "fanova")
        if method not in imp.METHODS:
            raise HTTPException(400, f"method must be one of {', '.join(imp.METHODS)} (got {method!r})")
        return json_response(await run_in_threadpool(self.importance_body, request.path_params["sweep_id"],
                                                     request.query_params.get("metric"), method))

    async def trial(self, request: Request) -> Response:
        return json_response(await run_in_threadpool(self.trial_body, request.path_params["sweep_id"],
                                                     request.path_params["trial_id"]))


def space_json(spec: Any) -> dict[str, Any]:
    """The spec's space for the parallel-coordinates axes: kind, log scale, choices."""
    try:
        space = parse_spec(spec).space
    except (SpecError, TypeError):
        return {}
    out: dict[str, Any] = {}
    for name, param in space.items():
        kind = getattr(param, "type", "choice")
        out[name] = {"type": kind, "log": kind == "loguniform", "values": getattr(param, "values", None)}
    return out
