"""A real dashboard over a real PostgreSQL: the schema migrated and the app
served by uvicorn on a free loopback port in a thread. Helpers to write rows
are in ``dashseed`` (this folder is put on sys.path, as tests/support is)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest
import uvicorn

sys.path.insert(0, os.path.dirname(__file__))
from dashseed import Dashboard  # noqa: E402
from servers import free_port, wait_port  # noqa: E402

from spotsweep.services.reporter.web.app import make_app  # noqa: E402
from spotsweep.shared.db import Database  # noqa: E402


@pytest.fixture()
def dashboard(database_url: str) -> Iterator[Dashboard]:
    db = Database(database_url)
    db.migrate()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(db), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()
    wait_port(port)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    yield Dashboard(f"http://127.0.0.1:{port}", db, stop)
    stop()
    db.close()

