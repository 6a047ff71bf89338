"""deploy/postgres/roles.sql against the real PostgreSQL (issue 19 section 3).

A sweep is run into a fresh database, the script is applied as the
superuser, and logins in each group show: the reader may SELECT the public
views and gets ``permission denied`` on the tables, and ``status``, ``ls``
and ``report`` work as the reader (readers check the schema, never migrate);
the writer writes the tables and can migrate. The dashboard, served by
uvicorn over a reader login, answers every page and API call (the trial page's
events come from the view ``trial_journal``, not the ``trial_events`` table).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import uvicorn
import yaml
from servers import free_port, wait_port

from spotsweep.services.reporter.web.app import make_app
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.db import Database

pytestmark = [pytest.mark.needs_pg, pytest.mark.timeout(180)]

ROLES_SQL = Path(__file__).parents[2] / "deploy" / "postgres" / "roles.sql"
VIEWS = ("trial_results", "metric_points", "sweep_results", "run_events", "trial_journal", "trial_segments",
         "agent_capacity")
SPEC = {
    "name": "pgroles",
    "command": ["python", "-c", "from spotsweep import trial; trial.report(1, loss=trial.params['x'])"],
    "metric": {"name": "loss", "mode": "min"},
    "space": {"x": [1, 2]},
    "resources": {"gpus": 0, "class": "cpu"},
}


def as_user(url: str, user: str) -> str:
    """``url`` logging in as ``user`` (the test server trusts loopback logins)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}@{rest.split('@', 1)[1]}"


def spotsweep(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def logins(database_url: str, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(sweep id, reader URL, writer URL) after a sweep ran and roles.sql was applied."""
    env = {**os.environ, "SPOTSWEEP_DATABASE_URL": database_url, "SPOTSWEEP_HOME": str(tmp_path / "home")}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    ran = spotsweep(env, "run", str(spec), "--workers", "1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with psycopg.connect(database_url, autocommit=True) as conn:
        sweep_id = conn.execute("SELECT sweep_id FROM sweeps").fetchone()[0]
        conn.execute(ROLES_SQL.read_text())
        conn.execute(ROLES_SQL.read_text())  # idempotent
        suffix = uuid.uuid4().hex[:6]
        reader, writer = f"reader_{suffix}", f"writer_{suffix}"
        conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE spotsweep_reader")
        conn.execute(f"CREATE ROLE {writer} LOGIN IN ROLE spotsweep_writer")
    try:
        yield sweep_id, as_user(database_url, reader), as_user(database_url, writer)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {reader}, {writer}")
            conn.execute(f"DROP ROLE IF EXISTS {reader}")
            conn.execute(f"DROP ROLE IF EXISTS {writer}")


def test_the_reader_selects_the_views_and_nothing_else(logins: tuple[str, str, str]) -> None:
    sweep_id, reader, _ = logins
    with psycopg.connect(reader, autocommit=True) as conn:
        for view in VIEWS:
            conn.execute(f"SELECT * FROM {view}").fetchall()
        assert conn.execute("SELECT count(*) FROM trial_results WHERE sweep_id = %s", (sweep_id,)).fetchone()[0] == 2
        for table in ("trials", "sweeps", "points", "trial_events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                conn.execute(f"SELECT * FROM {table}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM sweeps")


def test_status_ls_and_report_work_as_the_reader(logins: tuple[str, str, str], tmp_path: Path) -> None:
    sweep_id, reader, _ = logins
    env = {**os.environ, "SPOTSWEEP_DATABASE_URL": reader, "SPOTSWEEP_HOME": str(tmp_path / "home")}
    for args in (("status",), ("status", sweep_id), ("ls",), ("report", sweep_id)):
        out = spotsweep(env, *args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
        assert "permission denied" not in out.stderr


def test_cancel_and_extend_check_the_sweep_as_the_reader(logins: tuple[str, str, str], rabbit_url: str,
                                                          tmp_path: Path) -> None:
    """A submitter whose database login is the reader role: `cancel` and `extend` check the
    sweep through the public view and post their command (not `permission denied`)."""
    import pika

    from spotsweep.shared import topology

    sweep_id, reader, writer = logins
    # As if agents had run it (`spotsweep run` ran it here, whose own planner no message reaches), and from
    # another machine: cancel and extend go to the planner through RabbitMQ.
    with psycopg.connect(writer, autocommit=True) as conn:
        conn.execute("UPDATE trials SET agent = 'vm-1' WHERE sweep_id = %s", (sweep_id,))
    env = {**os.environ, "SPOTSWEEP_DATABASE_URL": reader, "SPOTSWEEP_AMQP_URL": rabbit_url,
           "SPOTSWEEP_HOME": str(tmp_path / "submitter")}
    for args in (("extend", sweep_id, "--max-steps", "100"), ("cancel", sweep_id)):
        out = spotsweep(env, *args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    posted = []
    with pika.BlockingConnection(pika.URLParameters(rabbit_url)) as conn:
        channel = conn.channel()
        while (got := channel.basic_get(topology.sweeps_queue().name, auto_ack=True))[0] is not None:
            posted.append(got[1].headers["kind"])
    assert posted == ["extend", "cancel"]


def test_the_writer_writes_and_migrates(logins: tuple[str, str, str]) -> None:
    sweep_id, _, writer = logins
    from spotsweep.shared.db import migrator

    assert migrator.migrate(writer) == []  # nothing pending, but it could: it holds the lock and the record
    with psycopg.connect(writer, autocommit=True) as conn:
        conn.execute("UPDATE sweeps SET note = 'ok' WHERE sweep_id = %s", (sweep_id,))
        assert conn.execute("SELECT count(*) FROM trials").fetchone()[0] == 2


def test_the_dashboard_serves_every_page_as_the_reader(logins: tuple[str, str, str], tmp_path: Path) -> None:
    sweep_id, reader, _ = logins
    db = Database(reader)
    db.check()  # what `spotsweep dashboard` does first: readers never migrate
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(db, LocalArtifactStore(tmp_path / "store")), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_port(port)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            trials = http.get(f"/api/sweeps/{sweep_id}/trials").json()
            assert len(trials) == 2
            trial_id = trials[0]["trial_id"]
            for path in ("/", f"/sweeps/{sweep_id}", f"/sweeps/{sweep_id}/trials/{trial_id}", "/healthz", "/api/sweeps",
                         f"/api/sweeps/{sweep_id}", f"/api/sweeps/{sweep_id}/curves?metric=loss",
                         f"/api/sweeps/{sweep_id}/best", f"/api/sweeps/{sweep_id}/importance",
                         f"/api/sweeps/{sweep_id}/seeds", f"/api/sweeps/{sweep_id}/timeline",
                         f"/api/sweeps/{sweep_id}/cost", f"/api/sweeps/{sweep_id}/resources"):
                got = http.get(path)
                assert got.status_code == 200, (path, got.text[:500])
            events = http.get(f"/api/sweeps/{sweep_id}/trials/{trial_id}").json()["events"]
    finally:
        server.should_exit = True
        thread.join(10)
        db.close()
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "trial.started" and kinds[-1] == "trial.finished", events
    assert events[-1]["detail"]["outcome"] == "completed" and events[-1]["agent"], events
