"""The dashboard's /healthz, /readyz and /metrics (issue 20 section 3), on its own port and on --metrics-port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest
from dashseed import Dashboard
from servers import free_port
from waiting import wait_until

from spotsweep.shared.db import Database

pytestmark = pytest.mark.integration


def _refuse_connections(database_url: str, refuse: bool) -> None:
    """Cut the dashboard off its database (its open connections too), or let it back in."""
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not refuse).lower()}')
        if refuse:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


def test_alive_always_ready_while_the_database_answers(dashboard: Dashboard, database_url: str) -> None:
    assert httpx.get(dashboard.url + "/readyz").json() == {"ok": True}
    metrics = httpx.get(dashboard.url + "/metrics")
    assert metrics.status_code == 200 and "process_resident_memory_bytes" in metrics.text
    _refuse_connections(database_url, True)
    try:
        ready = httpx.get(dashboard.url + "/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["ok"] is False, ready.text
        assert httpx.get(dashboard.url + "/healthz").json() == {"ok": True}  # alive: no restart needed
    finally:
        _refuse_connections(database_url, False)
    assert httpx.get(dashboard.url + "/readyz", timeout=30).status_code == 200


def test_the_dashboard_command_serves_the_probes_on_a_metrics_port_too(database_url: str, tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPOTSWEEP_DATABASE_URL": database_url}
    migrated = Database(database_url)
    migrated.migrate()
    migrated.close()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "dashboard", "--port", str(port), "--metrics-port",
                             str(metrics_port), "--metrics-host", "127.0.0.1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def ready(at: int) -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{at}/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(lambda: ready(metrics_port) and ready(port), timeout=60)
        assert httpx.get(f"http://127.0.0.1:{metrics_port}/healthz").text == "ok\n"
    finally:
        proc.terminate()
        proc.wait(30)
