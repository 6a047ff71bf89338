"""``--metrics-port``: ``/metrics``, ``/healthz`` and ``/readyz`` of a service, on their own small HTTP server.

* ``/metrics``: :mod:`spotsweep.shared.metrics` in Prometheus's text format.
* ``/healthz``: 200 while the process is alive and serving HTTP (a liveness
  probe: restarting the process would not help with anything else).
* ``/readyz``: 200 only while every readiness check passed recently, else
  503 with one line per check saying what is wrong. A check that fails, or
  has not finished within ``stale_after`` seconds (a partition can make a call
  hang until TCP gives up), makes the process unready: with the defaults (5 s,
  20 s) a lost broker or database shows within 25 s, inside the 30 s the
  deployment docs promise.

The standard library's threading HTTP server: three fixed paths need no
framework, and the probes keep answering while the service's threads are busy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from spotsweep.shared import log, metrics
from spotsweep.shared.errors import PermanentError

_log = log.get("spotsweep.health")
Check = Callable[[], None]  # returns when the dependency is fine, raises saying why not
INTERVAL_S = 5.0
STALE_AFTER_S = 20.0


@dataclass
class _Status:
    ok_at: float | None = None  # monotonic time of the last pass
    error: str | None = "not checked yet"


class Readiness:
    """Named checks, each run every ``interval`` s on its own thread; ready while all passed within ``stale_after`` s."""

    def __init__(self, interval: float = INTERVAL_S, stale_after: float = STALE_AFTER_S) -> None:
        self.interval, self.stale_after = interval, stale_after
        self._checks: dict[str, Check] = {}
        self._status: dict[str, _Status] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def add(self, name: str, check: Check) -> None:
        self._checks[name] = check
        self._status[name] = _Status()

    def start(self) -> None:
        for name, check in self._checks.items():
            threading.Thread(target=self._loop, args=(name, check), name=f"ready-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, name: str, check: Check) -> None:
        while not self._stop.is_set():
            try:
                check()
            except Exception as e:  # noqa: BLE001 - any failure means "not ready", with its reason
                with self._lock:
                    self._status[name].error = str(e) or type(e).__name__
            else:
                with self._lock:
                    self._status[name] = _Status(ok_at=time.monotonic(), error=None)
            self._stop.wait(self.interval)

    def report(self) -> tuple[bool, list[str]]:
        """(ready, one line per check)."""
        now = time.monotonic()
        lines, ready = [], bool(self._checks)
        with self._lock:
            for name, status in sorted(self._status.items()):
                if status.error is not None:
                    problem: str | None = status.error
                elif status.ok_at is None or now - status.ok_at > self.stale_after:
                    problem = f"no answer for {now - (status.ok_at or now):.0f} s"
                else:
                    problem = None
                ready = ready and problem is None
                lines.append(f"{name}: {problem or 'ok'}")
        return ready, lines


def _handler(readiness: Readiness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, metrics.exposition(), metrics.CONTENT_TYPE)
            elif path == "/healthz":
                self._answer(200, b"ok\n")
            elif path == "/readyz":
                ready, lines = readiness.report()
                self._answer(200 if ready else 503, ("\n".join(lines) + "\n").encode())
            else:
                self._answer(404, b"not found: /metrics, /healthz or /readyz\n")

        def _answer(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - probes every few seconds: not logged
            return

    return Handler


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True


def serve_health(host: str, port: int | None, readiness: Readiness) -> HealthServer | None:
    """Start the endpoints on ``host:port`` in the background (None: no port set, no server);
    a port that cannot be bound is a :class:`PermanentError` naming ``--metrics-port``."""
    if port is None:
        return None
    try:
        server = HealthServer((host, port), _handler(readiness))
    except OSError as e:
        raise PermanentError(f"--metrics-port {port}: cannot listen on {host}:{port}: {e.strerror or e}") from None
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    _log.info(f"metrics and probes on http://{host}:{server.server_address[1]}/metrics, /healthz, /readyz")
    return server


def probes(host: str, port: int | None, checks: dict[str, Check]) -> Readiness:
    """A service's readiness over ``checks``, served with ``/metrics`` and ``/healthz`` on ``host:port``
    (the checks run only when there is a port to answer on)."""
    readiness = Readiness()
    for name, check in checks.items():
        readiness.add(name, check)
    if serve_health(host, port, readiness) is not None:
        readiness.start()
    return readiness
