"""Serving the dashboard: the database from the settings, uvicorn until a signal.

uvicorn's limits are set here (docs/dashboard.md, "Limits"), as its defaults let
a slow client hold a socket for good: it has no timeout for a request's headers
(its keep-alive timer runs only between requests, and every byte received stops
it, so 300 sockets sending a header a byte at a time stayed open).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from spotsweep.services.reporter.web.app import make_app
from spotsweep.services.reporter.web.guard import exposure

from spotsweep.shared import log as logs
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import for_reading as database
from spotsweep.shared.db.migrator import SchemaNotReady
from spotsweep.shared.health import probes
from spotsweep.shared.health_startup import database_check
from spotsweep.shared.settings import DashboardSettings, Settings, default

DEFAULT_HOST, DEFAULT_PORT = default(DashboardSettings, "dashboard_host"), default(DashboardSettings, "dashboard_port")
HEADER_SECONDS = 10.0  # to finish a request's headers, from the connection or the previous answer
KEEP_ALIVE_SECONDS = 5  # an idle keep-alive connection closes after this
MAX_HEAD = 16 * 1024  # h11's own default, said here: a longer request line or header block is a 400
MAX_CONNECTIONS = 256  # connections or requests past which uvicorn answers 503


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers: armed when the
    connection opens and when a response ends, it closes the connection when no new
    request has begun by then (a request being answered is never cut)."""

    header_seconds = HEADER_SECONDS
    _deadline: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle that was current when the deadline was armed

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._waiting_after = self.cycle
        self._deadline = self.loop.call_later(self.header_seconds, self._expire)

    def _expire(self) -> None:
        busy = self.cycle is not None and not self.cycle.response_complete
        if self.cycle is self._waiting_after and not busy and not self.transport.is_closing():
            if self.conn.our_state in (h11.IDLE, h11.DONE):
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)


def options(host: str, port: int) -> dict[str, Any]:
    """uvicorn's options for the dashboard, with the limits above (HeaderTimeoutProtocol: the headers' deadline)."""
    return {"host": host, "port": port, "log_level": "warning", "access_log": False, "http": HeaderTimeoutProtocol,
            "timeout_keep_alive": KEEP_ALIVE_SECONDS, "h11_max_incomplete_event_size": MAX_HEAD,
            "limit_concurrency": MAX_CONNECTIONS}


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
    """Serve the dashboard over ``SPOTSWEEP_DATABASE_URL``'s database (local
    mode's embedded one when unset) until SIGINT or SIGTERM; returns the exit code.
    Beyond loopback it needs a token or ``--insecure`` (:func:`.guard.exposure`)."""
    log = logs.get(__name__)
    secret = getattr(settings, "dashboard_token", None)
    token = secret.get_secret_value() if secret is not None else None
    warning = exposure(host, token, bool(getattr(settings, "dashboard_insecure", False)))
    if warning:
        log.warning("dashboard.insecure", why=warning)
    db = database(settings, ready=False)
    if isinstance(settings, DashboardSettings):  # --metrics-port: also on a port of its own (the dashboard's serves them too)
        probes(settings.metrics_host, settings.metrics_port, {"postgresql": database_check(db.url, db.options)})
    _wait_for_schema(db, log)
    log.info("dashboard.serving", url=f"http://{host}:{port}/", token=token is not None)
    # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again
    # with the handlers it found installed: these no-ops make that a plain
    # return, so a stopped dashboard exits 0 like the other services.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.run(make_app(db, token=token), **options(host, port))
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
    server = uvicorn.Server(uvicorn.Config(make_app(db), **options(host, port)))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(5)

    return stop
