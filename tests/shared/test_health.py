"""shared/health.py and shared/metrics.py without any service: the probes' semantics and the metric names."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from spotsweep.shared import metrics
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.health import Readiness, probes, serve_health
from tests.support.servers import free_port
from tests.support.waiting import wait_until


def get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_ready_only_once_every_check_passed_and_while_none_fails() -> None:
    database_up = threading.Event()

    def database() -> None:
        if not database_up.is_set():
            raise RuntimeError("cannot connect to PostgreSQL at postgresql://postgres:***@db/x")

    port = free_port()
    readiness = Readiness(interval=0.05)
    readiness.add("rabbitmq", lambda: None)
    readiness.add("postgresql", database)
    serve_health("127.0.0.1", port, readiness)
    readiness.start()
    try:
        assert wait_until(lambda: "rabbitmq: ok" in get(port, "/readyz")[2])
        status, _, text = get(port, "/readyz")
        assert status == 503 and "postgresql: cannot connect to PostgreSQL at postgresql://postgres:***@db/x" in text
        assert get(port, "/healthz")[0] == 200  # alive all along
        database_up.set()
        assert wait_until(lambda: get(port, "/readyz")[0] == 200)
        assert get(port, "/readyz")[2] == "postgresql: ok\nrabbitmq: ok\n"
        database_up.clear()
        assert wait_until(lambda: get(port, "/readyz")[0] == 503)
    finally:
        readiness.stop()


def test_a_check_that_hangs_makes_the_process_unready() -> None:
    """A call stuck in a network partition never returns: its last pass grows stale."""
    stuck, passed = threading.Event(), threading.Event()

    def broker() -> None:
        passed.set()
        if stuck.is_set():
            threading.Event().wait()  # never returns (a daemon thread)

    readiness = Readiness(interval=0.05, stale_after=0.5)
    readiness.add("rabbitmq", broker)
    assert readiness.report() == (False, ["rabbitmq: not checked yet"])  # still starting
    readiness.start()
    try:
        assert wait_until(lambda: readiness.report()[0])
        stuck.set()
        assert wait_until(lambda: not readiness.report()[0], timeout=10)
        assert readiness.report()[1][0].startswith("rabbitmq: no answer for ")
    finally:
        readiness.stop()


def test_metrics_are_prometheus_text_and_other_paths_are_404() -> None:
    port = free_port()
    serve_health("127.0.0.1", port, Readiness())
    metrics.export(metrics.COLLECTOR)
    metrics.POINTS_INGESTED.inc(3)
    status, content_type, text = get(port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE spotsweep_points_ingested_total counter" in text and "process_cpu_seconds_total" in text
    assert get(port, "/readyz")[0] == 503  # no checks: never claims to be ready
    assert get(port, "/admin")[0] == 404


def test_no_port_no_server_and_a_taken_port_names_the_flag() -> None:
    assert serve_health("127.0.0.1", None, Readiness()) is None
    assert probes("127.0.0.1", None, {"rabbitmq": lambda: None}).report()[0] is False  # nothing runs the checks
    port = free_port()
    serve_health("127.0.0.1", port, Readiness())
    with pytest.raises(PermanentError, match=rf"^--metrics-port {port}: cannot listen on 127.0.0.1:{port}: "):
        serve_health("127.0.0.1", port, Readiness())


def test_the_names_a_dashboard_may_query() -> None:
    assert {"spotsweep_trials_dispatched_total", "spotsweep_trials_finished_total", "spotsweep_trials_in_flight",
            "spotsweep_points_ingested_total", "spotsweep_ingest_batch_seconds_bucket", "spotsweep_agent_slots",
            "spotsweep_agent_slots_busy", "spotsweep_agent_preemptions_total", "spotsweep_checkpoint_upload_seconds_count",
            "spotsweep_checkpoint_upload_bytes_total", "spotsweep_queue_depth"} <= metrics.names()
