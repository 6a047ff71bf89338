"""Serving the dashboard: the database from the settings, uvicorn until a signal."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from spotsweep.shared import log as logs
from spotsweep.shared.db import Database
from spotsweep.shared.db.migrator import SchemaNotReady
from spotsweep.shared.health import probes
from spotsweep.shared.health_startup import database_check
from spotsweep.shared.settings import DashboardSettings, Settings, default

DEFAULT_HOST, DEFAULT_PORT = default(DashboardSettings, "dashboard_host"), default(DashboardSettings, "dashboard_port")


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
    """Serve the dashboard over ``SPOTSWEEP_DATABASE_URL``'s database (local
    mode's embedded one when unset) until SIGINT or SIGTERM; returns the exit code."""
    import uvicorn

    from spotsweep.services.commands import database
    from spotsweep.services.reporter.web.app import make_app

    log = logs.get(__name__)
    db = database(settings, ready=False)
    if isinstance(settings, DashboardSettings):  # --metrics-port: also on a port of its own (the dashboard's serves them too)
        probes(settings.metrics_host, settings.metrics_port, {"postgresql": database_check(db.url, db.options)})
    _wait_for_schema(db, log)
    log.info("dashboard.serving", url=f"http://{host}:{port}/")
    # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again
    # with the handlers it found installed: these no-ops make that a plain
    # return, so a stopped dashboard exits 0 like the other services.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.run(make_app(db), host=host, port=port, log_level="warning", access_log=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        db.close()
    return 0


def _wait_for_schema(db: Database, log: Any, every: float = 5.0) -> None:
    """A dashboard started before the planner waits for the schema (readers never migrate)."""
    while True:
        try:
            return db.check()
        except SchemaNotReady as e:
            log.warning("dashboard.waiting_for_schema", why=str(e))
            time.sleep(every)


def serve_in_background(db: Database, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> Callable[[], None]:
    """Serve the dashboard from a daemon thread (``spotsweep run --dashboard``);
    returns a function that stops it. uvicorn leaves signals to the main thread
    when it runs in another, so Ctrl-C still reaches the sweep."""
    import uvicorn

    from spotsweep.services.reporter.web.app import make_app

    server = uvicorn.Server(uvicorn.Config(make_app(db), host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(5)

    return stop
