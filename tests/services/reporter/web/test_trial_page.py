"""The trial page and ``GET /api/sweeps/<id>/trials/<trial_id>``: events from the
journal, the log tail and the checkpoint list from the artifact store (moto's
S3 server), over a real PostgreSQL and a real uvicorn."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from dashseed import HOSTILE, add_sweep, add_trial
from psycopg.types.json import Jsonb
from servers import free_port, wait_port

from spotsweep.services.reporter.web.app import make_app
from spotsweep.shared.artifacts import ArtifactStore, S3ArtifactStore
from spotsweep.shared.artifacts.checkpoint_layout import log_key
from spotsweep.shared.artifacts.checkpoints import commit_checkpoint, upload_checkpoint_files
from spotsweep.shared.artifacts.port import ObjectInfo
from spotsweep.shared.db import Database
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.settings import Settings

pytestmark = pytest.mark.integration
SWEEP = "page-test-1"


def serve(db: Database, store: ArtifactStore) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(db, store), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_port(port)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture()
def db(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    db.migrate()
    yield db
    db.close()


@pytest.fixture()
def s3(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    return S3ArtifactStore.from_settings(Settings())


def seed(db: Database, store: ArtifactStore, tmp: Path) -> str:
    add_sweep(db, SWEEP)
    trial_id = add_trial(db, SWEEP, 0, "exp_000", {"lr": 0.1, "opt": "adam", "layers": 2}, attempt=2, preemptions=1,
                         metrics={"val_loss": 1.5})
    with db.transaction() as conn:
        for i, (kind, attempt, body) in enumerate([
                ("trial.started", 1, {"agent": "node-a", "resume_step": None}),
                ("trial.finished", 1, {"agent": "node-a", "outcome": "preempted"}),
                ("trial.started", 2, {"agent": "node-b", "resume_step": 20}),
                ("trial.finished", 2, {"agent": "node-b", "outcome": "completed", "exit_code": 0})]):
            conn.execute("INSERT INTO trial_events (message_id, sweep_id, trial_id, attempt, kind, body, recorded_at)"
                         " VALUES (%s, %s, %s, %s, %s, %s, now() + %s * interval '1 second')",
                         (f"m{i}", SWEEP, trial_id, attempt, kind, Jsonb(body), i))
    store.put_bytes(log_key(SWEEP, trial_id, 1, "stdout"), b"attempt one\n")
    store.put_bytes(log_key(SWEEP, trial_id, 2, "stdout"), "".join(f"line {i}\n" for i in range(1000)).encode())
    store.put_bytes(log_key(SWEEP, trial_id, 2, "stderr"), f"{HOSTILE}\n".encode())
    for step in (10, 20):
        src = tmp / f"c{step}"
        src.mkdir()
        (src / "model.pt").write_bytes(b"x" * 2048 * step)
        commit_checkpoint(store, SWEEP, trial_id, upload_checkpoint_files(store, SWEEP, trial_id, step, src))
    return trial_id


def test_trial_page_shows_events_log_tail_and_checkpoints(db: Database, s3: ArtifactStore, tmp_path: Path) -> None:
    trial_id = seed(db, s3, tmp_path)
    for url in serve(db, s3):
        body: dict[str, Any] = json.loads(httpx.get(f"{url}/api/sweeps/{SWEEP}/trials/{trial_id}", timeout=30).text)
        assert [(e["kind"], e["attempt"], e["agent"]) for e in body["events"]] == [
            ("trial.started", 1, "node-a"), ("trial.finished", 1, "node-a"), ("trial.started", 2, "node-b"),
            ("trial.finished", 2, "node-b")]
        assert body["events"][1]["detail"] == {"outcome": "preempted"} and body["events"][2]["detail"] == {"resume_step": 20}
        assert body["log_attempt"] == 2 and body["store_error"] is None
        assert body["log_tail"][-2:] == ["==> stderr <==", HOSTILE] and body["log_tail"][-3] == "line 999"
        assert len(body["log_tail"]) == 200 + 2
        assert [(c["step"], c["size"], c["latest"], c["complete"]) for c in body["checkpoints"]] == [
            (20, 40960, True, True), (10, 20480, False, True)]
        assert all(c["time"] for c in body["checkpoints"])

        page = httpx.get(f"{url}/sweeps/{SWEEP}/trials/{trial_id}", timeout=30)
        assert page.status_code == 200
        assert "line 999" in page.text and "line 700" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and HOSTILE not in page.text
        assert "41.0 kB" in page.text and "outcome=preempted" in page.text and "resume_step=20" in page.text


class Unreachable(ArtifactStore):
    """A store whose every call fails as an S3 endpoint that is down does."""

    def _down(self, *args: object) -> Any:
        raise RetryableError("S3 list sweeps/: connection refused")

    put_bytes = put_file = get_bytes = get_file = list = delete = uri = _down

    def list_info(self, prefix: str) -> list[ObjectInfo]:
        return self._down()


def test_an_unreachable_store_is_a_line_not_an_error(db: Database, s3: ArtifactStore, tmp_path: Path) -> None:
    trial_id = seed(db, s3, tmp_path)
    for url in serve(db, Unreachable()):
        page = httpx.get(f"{url}/sweeps/{SWEEP}/trials/{trial_id}", timeout=30)
        assert page.status_code == 200
        assert "the artifact store cannot be read: S3 list sweeps/: connection refused" in page.text
        assert "trial.finished" in page.text  # the database's part still shows
        body = httpx.get(f"{url}/api/sweeps/{SWEEP}/trials/{trial_id}", timeout=30).json()
        assert body["store_error"].startswith("the artifact store cannot be read") and body["checkpoints"] == []


def test_a_running_trials_page_shows_its_log_as_it_is_uploaded(db: Database, s3: ArtifactStore, browser: Any) -> None:
    add_sweep(db, SWEEP)
    trial_id = add_trial(db, SWEEP, 0, "exp_live", {"lr": 0.1, "opt": "adam", "layers": 2}, state="running")
    for url in serve(db, s3):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(f"{url}/sweeps/{SWEEP}/trials/{trial_id}")
        assert "no logs uploaded yet" in page.inner_text("#log-tail")
        s3.put_bytes(log_key(SWEEP, trial_id, 1, "stdout"), b"epoch 1 loss 0.5\n")  # the agent's upload of the running log
        page.wait_for_function("document.getElementById('log-tail').textContent.includes('epoch 1 loss 0.5')", timeout=15_000)
        assert "attempt 1" in page.inner_text("#log-title")
        context.close()
