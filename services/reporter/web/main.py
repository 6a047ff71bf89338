"""Serving the dashboard: the database from the settings, uvicorn until a signal."""

from __future__ import annotations

from spotsweep.shared import log as logs
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
    try:
        uvicorn.run(make_app(db), host=host, port=port, log_level="warning", access_log=False)
    finally:
        db.close()
    return 0
