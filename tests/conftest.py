"""Fixtures for the real backends: a RabbitMQ vhost, a PostgreSQL database and
a moto S3 server, each fresh per test session or test, all on loopback.

Nothing here mocks a backend: a test that asks for ``rabbit_url`` talks to
RabbitMQ. The services are expected to run (``.ci/run`` starts them); when one
is not reachable the fixture fails loudly rather than skipping, so a green run
means the integration paths were exercised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/support holds helpers shared by test modules and the chaos runner
# (private servers, services as processes); test modules import them by name.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))
from cluster import Cluster  # noqa: E402
from markers import SERVICE_MARKERS, service_markers  # noqa: E402
from servers import free_port, wait_port  # noqa: E402
from vhosts import VhostPool  # noqa: E402

# The tests and CI run as root and their trials are the project's own: agents they start may run
# trials as root (without it an agent as root refuses to start: services/agent/insecure.py).
# Set here, before any service is spawned; a test that scrubs SPOTSWEEP_* passes it on.
os.environ.setdefault("SPOTSWEEP_ALLOW_ROOT_TRIALS", "1")

RABBIT_HOST = os.environ.get("SPOTSWEEP_TEST_RABBIT_HOST", "127.0.0.1")
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by the services it needs, from the fixtures it uses; any
    ``needs_*`` also marks it ``integration`` (the umbrella ``make integration`` runs)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = {v for v in callspec.params.values() if isinstance(v, str)} if callspec else set()
        needs = service_markers(set(getattr(item, "fixturenames", ())), params)
        needs += [m.name for m in item.iter_markers() if m.name in SERVICE_MARKERS and m.name not in needs]
        for name in needs:
            item.add_marker(name)
        if needs and item.get_closest_marker("integration") is None:
            item.add_marker("integration")


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test that timed out may leave a thread blocked for ever; Python would wait on it at exit and CI
    would hang with the results already printed. Leave at once, with pytest's own exit status."""
    import threading

    stuck = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stuck:
        print(f"\nconftest: threads still running after the tests: {stuck}; exiting without waiting", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(int(getattr(config, "_spotsweep_status", 1)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._spotsweep_status = exitstatus  # type: ignore[attr-defined]  # for pytest_unconfigure


PG_ADMIN_URL = os.environ.get("SPOTSWEEP_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def _vhosts() -> Iterator[VhostPool]:
    pool = VhostPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def rabbit_vhost(_vhosts: VhostPool) -> str:
    """A fresh vhost for this test session, so runs never see each other's queues."""
    return _vhosts.take()


@pytest.fixture()
def rabbit_url(_vhosts: VhostPool) -> Iterator[str]:
    """A fresh vhost per test: queues start empty (made in batches: :mod:`vhosts`)."""
    vhost = _vhosts.take()
    yield f"amqp://guest:guest@{RABBIT_HOST}:5672/{vhost}"
    _vhosts.release(vhost)


@pytest.fixture()
def database_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database per test, dropped afterwards."""
    import psycopg

    name = f"spotsweep_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server as a separate process on loopback: ``127.0.0.1:PORT``."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture()
def s3_env(s3_endpoint: str) -> dict[str, str]:
    """SPOTSWEEP_S3_* settings for a fresh bucket on the moto server."""
    return {
        "SPOTSWEEP_S3_ENDPOINT": s3_endpoint,
        "SPOTSWEEP_S3_ACCESS_KEY": "testing",
        "SPOTSWEEP_S3_SECRET_KEY": "testing-secret",
        "SPOTSWEEP_S3_BUCKET": f"spotsweep-{uuid.uuid4().hex[:8]}",
        "SPOTSWEEP_S3_REGION": "us-east-1",
    }


@pytest.fixture()
def cluster(rabbit_url: str, database_url: str, s3_env: dict[str, str], tmp_path: Path) -> Iterator[Cluster]:
    """Services as separate processes over the shared RabbitMQ (a fresh vhost),
    a fresh PostgreSQL database and moto's S3; everything killed afterwards."""
    env = {**os.environ, "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_DATABASE_URL": database_url,
           "SPOTSWEEP_HOME": str(tmp_path / "home"), **s3_env}
    c = Cluster(env, tmp_path)
    yield c
    c.kill_all()


class RecordingDelivery:
    """A delivery value for calling handlers directly (nameko's worker_factory
    style): records whether the handler acked, requeued or dead-lettered it."""

    def __init__(self, body: bytes, headers: dict | None = None, message_id: str | None = None, redelivered: bool = False) -> None:
        self.body = body
        self.headers = headers or {}
        self.message_id = message_id
        self.redelivered = redelivered
        self.routing_key = ""
        self.priority = 0
        self.settled: str | None = None

    def ack(self) -> None:
        assert self.settled is None, f"settled twice ({self.settled}, ack)"
        self.settled = "ack"

    def nack(self, requeue: bool = True) -> None:
        assert self.settled is None, f"settled twice ({self.settled}, nack)"
        self.settled = "requeue" if requeue else "dead-letter"


@pytest.fixture()
def delivery() -> type[RecordingDelivery]:
    return RecordingDelivery
