"""``spotsweep dashboard``: the ASGI app (Starlette) and its pages.

Pages are Jinja2 templates with autoescaping on, so every name and error
text a trial produced is text, never markup; the charts and the leaderboard
are drawn in the browser by ECharts (vendored under ``static/``, no CDN)
from the JSON API (:mod:`.api`). Errors never show a traceback: unknown ids are
404 (a page, or ``{"error": ...}`` under ``/api``), a database that is down
is 503, anything else 500 with one line, and no error message is longer than
:data:`MESSAGE_CHARS` (a 100 KB id is not echoed back).
"""

from __future__ import annotations

from datetime import datetime, timezone
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from spotsweep.services.reporter.web import present
from spotsweep.services.reporter.web.api import Api, _int, json_response
from spotsweep.services.reporter.web.compare import Compare, requested
from spotsweep.services.reporter.web.guard import Admission, TokenGate
from spotsweep.services.reporter.web.importance import load as load_importance
from spotsweep.services.reporter.web.logs import ATTEMPT_LIMIT, TrialLogs
from spotsweep.services.reporter.web.sweep_api import SweepPanels
from spotsweep.shared.artifacts import ArtifactStore
from spotsweep.shared.artifacts.browse import STREAMS
from spotsweep.shared.db import Database
from spotsweep.shared.errors import RetryableError
from spotsweep.shared import log as logs
from spotsweep.shared import metrics

log = logs.get(__name__)
PACKAGE = "spotsweep.services.reporter.web"
POLL_SECONDS = 3  # a running sweep's page is at most this far behind (plus one request)
# Requests served at once, past which 503: each holds a thread of the pool (40) and at
# most a few MB (a trial page's log tails are 200 KiB a stream, :mod:`.trial_api`).
CONCURRENT = 32
MESSAGE_CHARS = 300


def cost_text(sweep: dict[str, Any]) -> str:
    """``1.50 GPU-h · 1.35 (on demand 4.35)``: a sweep's cost for the index (as index.js writes it)."""
    if sweep.get("gpu_hours") is None:
        return ""
    text = f"{sweep['gpu_hours']:.2f} {'slot' if sweep.get('unit') == 'slot-hours' else 'GPU'}-h"
    if sweep.get("cost") is not None:
        text += f" · {sweep['cost']:.2f}"
    if sweep.get("on_demand_cost") is not None:
        text += f" (on demand {sweep['on_demand_cost']:.2f})"
    return text


class Pages:
    def __init__(self, db: Database, api: Api) -> None:
        self.db, self.api = db, api
        self.env = Environment(loader=PackageLoader(PACKAGE, "templates"), autoescape=select_autoescape(default=True))
        self.env.globals["poll_ms"] = POLL_SECONDS * 1000
        self.env.filters.update(cost_text=cost_text, magnitude=present.magnitude)
        self.logs_api, self.compare_api = TrialLogs(api), Compare(api)

    def render(self, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=code)

    async def index(self, request: Request) -> Response:
        sweeps = await run_in_threadpool(self.api.sweeps_body)
        return self.render("index.html", sweeps=sweeps)

    async def sweep(self, request: Request) -> Response:
        body = await run_in_threadpool(self.api.sweep_body, request.path_params["sweep_id"])
        return self.render("sweep.html", sweep=body)

    async def trial(self, request: Request) -> Response:
        sweep_id, trial_id = request.path_params["sweep_id"], request.path_params["trial_id"]
        sweep = await run_in_threadpool(self.api._sweep, sweep_id)
        trial = await run_in_threadpool(self.api.trial_body, sweep_id, trial_id)
        now = datetime.now(timezone.utc)
        return self.render("trial.html", sweep=sweep, trial=trial, age=present.age(trial["finished_at"], now))

    async def logs(self, request: Request) -> Response:
        """An attempt's whole stdout and stderr (:mod:`.logs`): the newest attempt with a log unless ``?attempt=N``."""
        sweep_id, trial_id = request.path_params["sweep_id"], request.path_params["trial_id"]
        sweep = await run_in_threadpool(self.api._sweep, sweep_id)
        trial, attempts, store_error = await run_in_threadpool(self.logs_api.attempts, sweep_id, trial_id)
        default = attempts[-1] if attempts else trial["attempts"] or 1
        attempt = _int(request, "attempt", default, 1, ATTEMPT_LIMIT)
        return self.render("log.html", sweep=sweep, trial=trial, attempt=attempt, attempts=attempts,
                           store_error=store_error, streams=STREAMS)

    async def compare(self, request: Request) -> Response:
        """Sweeps side by side (:mod:`.compare`); without ``?sweeps=``, how to pick them."""
        if not request.query_params.get("sweeps"):
            return self.render("compare.html", sweeps=[], asked="")
        rows = await run_in_threadpool(self.compare_api.resolve, requested(request))
        return self.render("compare.html", sweeps=rows, asked=",".join(r["sweep_id"] for r in rows))

    async def healthz(self, request: Request) -> Response:
        """Liveness: the process serves requests (the database is /readyz's concern)."""
        return json_response({"ok": True})

    async def readyz(self, request: Request) -> Response:
        """Readiness: the results database answers."""
        def ping() -> None:
            with self.db.transaction() as conn:
                conn.execute("SELECT 1 FROM trial_results LIMIT 1")

        try:
            await run_in_threadpool(ping)
        except RetryableError as e:
            return json_response({"ok": False, "database": str(e)}, 503)
        return json_response({"ok": True})


async def metrics_page(request: Request) -> Response:
    """The process's Prometheus metrics (shared/metrics.py), as the services' ``--metrics-port`` serves them."""
    return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)


def _error_handlers(pages: Pages) -> dict[Any, Any]:
    def answer(request: Request, status: int, message: str) -> Response:
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + " [...]"
        if request.url.path.startswith("/api/") or request.url.path in ("/healthz", "/readyz"):
            return json_response({"error": message}, status)
        return pages.render("error.html", status, status=status, message=message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return answer(request, exc.status_code, str(exc.detail))

    async def unavailable(request: Request, exc: Exception) -> Response:
        log.warning("dashboard.database_unavailable", error=str(exc))
        return answer(request, 503, f"the results database is unavailable: {exc}")

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("dashboard.error", path=request.url.path)
        return answer(request, 500, f"internal error ({type(exc).__name__}); the dashboard's log has the details")

    return {HTTPException: http_error, RetryableError: unavailable, Exception: internal}


def make_app(db: Database, store: ArtifactStore | None = None, token: str | None = None,
             concurrent: int = CONCURRENT) -> Starlette:
    """The dashboard over ``db`` (schema already there: ``Database.migrate()``); the trial
    page reads logs and checkpoints from ``store`` (default: the settings' store); with
    ``token``, every request but the probes must carry it (:class:`.guard.TokenGate`)."""
    api = Api(db, store)
    pages = Pages(db, api)
    panels = SweepPanels(api)
    load_importance()  # scikit-learn loads before the first request, not during the first importance call
    static = resources.files(PACKAGE).joinpath("static")
    routes = [
        Route("/", pages.index),
        Route("/sweeps/{sweep_id}", pages.sweep),
        Route("/sweeps/{sweep_id}/trials/{trial_id}", pages.trial),
        Route("/sweeps/{sweep_id}/trials/{trial_id}/logs", pages.logs),
        Route("/compare", pages.compare),
        Route("/api/compare", pages.compare_api.api_answer),
        Route("/healthz", pages.healthz),
        Route("/readyz", pages.readyz),
        Route("/metrics", metrics_page),
        Route("/api/sweeps", api.sweeps),
        Route("/api/sweeps/{sweep_id}", api.sweep),
        Route("/api/sweeps/{sweep_id}/trials", api.trials),
        Route("/api/sweeps/{sweep_id}/trials/{trial_id}", api.trial),
        Route("/api/sweeps/{sweep_id}/trials/{trial_id}/log", pages.logs_api.page),
        Route("/api/sweeps/{sweep_id}/trials/{trial_id}/log.txt", pages.logs_api.text),
        Route("/api/sweeps/{sweep_id}/curves", api.curves),
        Route("/api/sweeps/{sweep_id}/best", api.best),
        Route("/api/sweeps/{sweep_id}/importance", api.importance),
        Route("/api/sweeps/{sweep_id}/seeds", panels.seeds),
        Route("/api/sweeps/{sweep_id}/timeline", panels.timeline),
        Route("/api/sweeps/{sweep_id}/cost", panels.cost),
        Route("/api/sweeps/{sweep_id}/resources", panels.resources),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    middleware = [Middleware(Admission, limit=concurrent)]
    if token:
        def login_page(next_path: str, error: str | None) -> str:
            return pages.env.get_template("login.html").render(next=next_path, error=error)

        middleware.insert(0, Middleware(TokenGate, token=token, login_page=login_page))
    return Starlette(routes=routes, exception_handlers=_error_handlers(pages), middleware=middleware)
