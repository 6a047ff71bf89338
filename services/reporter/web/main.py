"""Serving the dashboard: the database from the settings, uvicorn until a signal."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from spotsweep.shared import log as logs
from spotsweep.shared.db import Database
from spotsweep.shared.settings import Settings

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8265


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
    """Serve the dashboard over ``SPOTSWEEP_DATABASE_URL``'s database (local
    mode's embedded one when unset) until SIGINT or SIGTERM; returns the exit code."""
    import uvicorn

    from spotsweep.services.local import database
    from spotsweep.services.reporter.web.app import make_app

    db = database(settings)
    db.migrate()  # a dashboard started before any service shows no sweeps, not an error
    log = logs.get(__name__)
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
