"""Anyone who reaches the dashboard cannot exhaust it (issue 28, item 2): the real
``spotsweep dashboard`` process over a real PostgreSQL and a real S3 server (moto).

* 16 requests at once for the page of a trial with 60 MiB of logs keep the
  process under 300 MB (it read both logs whole to show 200 lines: ~145 MB each)
  and every answer ends with the logs' last lines;
* sockets that never finish their request's headers, a byte a second, are closed
  (uvicorn alone closed none: its keep-alive timer runs only between requests);
* a 100 KB id gets a short answer, never the id back.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
import psutil
import pytest
from psycopg.types.json import Jsonb
from servers import free_port, wait_port

from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.artifacts.checkpoint_layout import log_key
from spotsweep.shared.db import Database
from spotsweep.shared.settings import Settings

pytestmark = pytest.mark.integration
SWEEP, TRIAL = "limits-1", "limits-1.0"
MB = 1_000_000
MiB = 1024 * 1024


@dataclass
class Served:
    url: str
    port: int
    proc: subprocess.Popen[str]


def _seed(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    spec = {"name": "limits", "command": ["python", "train.py"], "metric": {"name": "loss", "mode": "min"},
            "space": {"lr": [0.1]}, "resources": {"gpus": 0, "class": "cpu"}}
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, created_at) VALUES (%s, 'limits', %s, 'running', %s)",
                     (SWEEP, Jsonb(spec), datetime.now(timezone.utc)))
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, attempt)"
                     " VALUES (%s, %s, 0, 'exp_000', %s, 'running', 1)", (TRIAL, SWEEP, Jsonb({"lr": 0.1})))
    db.close()


def _write_log(path: Path, size: int, last: str) -> None:
    line = b"epoch 1 step 100 loss 0.4321 " + b"x" * 70 + b"\n"
    with open(path, "wb") as f:
        block = line * (MiB // len(line))
        while f.tell() + len(block) < size:
            f.write(block)
        f.write(f"{last}\n".encode())


@pytest.fixture()
def dashboard(database_url: str, s3_env: dict[str, str], tmp_path: Path) -> Iterator[Served]:
    _seed(database_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env.update(s3_env, SPOTSWEEP_DATABASE_URL=database_url, SPOTSWEEP_HOME=str(tmp_path / "home"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "dashboard", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, timeout=60)
        yield Served(f"http://127.0.0.1:{port}", port, proc)
    finally:
        proc.terminate()
        proc.wait(30)


def test_sixteen_trial_pages_at_once_over_60_mib_of_logs_stay_under_300_mb(
        dashboard: Served, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    store = S3ArtifactStore.from_settings(Settings())
    for stream, size in (("stdout", 32 * MiB), ("stderr", 28 * MiB)):
        _write_log(tmp_path / stream, size, f"the last line of {stream}")
        store.put_file(log_key(SWEEP, TRIAL, 1, stream), tmp_path / stream)
        (tmp_path / stream).unlink()

    process = psutil.Process(dashboard.proc.pid)
    idle = peak = process.memory_info().rss
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.02)

    def get(path: str) -> httpx.Response:
        return httpx.get(f"{dashboard.url}{path}", timeout=120)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        paths = [f"/sweeps/{SWEEP}/trials/{TRIAL}"] * 12 + [f"/api/sweeps/{SWEEP}/trials/{TRIAL}"] * 4
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(get, paths))
    finally:
        done.set()
        watcher.join()
    assert [a.status_code for a in answers] == [200] * len(paths)
    for a in answers:
        assert "the last line of stdout" in a.text and "the last line of stderr" in a.text
    assert max(len(a.content) for a in answers) < 2 * MB
    print(f"the dashboard's RSS: {idle / MB:.0f} MB idle, {peak / MB:.0f} MB at most")
    assert peak < 300 * MB, f"the dashboard's memory peaked at {peak / MB:.0f} MB"


def _half_open(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: dashboard\r\n")  # the blank line that ends the headers never comes
        socks.append(s)
    return socks


def test_sockets_that_never_finish_their_headers_are_closed(dashboard: Served) -> None:
    socks = _half_open(dashboard.port, 100)
    open_ = set(socks)
    deadline = time.monotonic() + 40  # the dashboard's deadline is 10 s; uvicorn alone never closes them
    try:
        while open_ and time.monotonic() < deadline:
            for s in list(open_):
                try:
                    s.send(b"X")  # a byte a second: each one stopped uvicorn's keep-alive timer
                except OSError:
                    open_.discard(s)
            readable, _, _ = select.select(list(open_), [], [], 1.0)
            for s in readable:
                try:
                    if not s.recv(65536):
                        open_.discard(s)
                except OSError:
                    open_.discard(s)
        assert not open_, f"{len(open_)} of 100 slow sockets still open after 40 s"
        assert httpx.get(f"{dashboard.url}/healthz", timeout=10).json() == {"ok": True}  # and it still serves
    finally:
        for s in socks:
            s.close()


def _raw_get(port: int, path: str) -> bytes:
    """The raw answer to a GET; what arrived before the server closed, if it closed with the request unread."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        out = b""
        try:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: dashboard\r\nConnection: close\r\n\r\n".encode())
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    return out


def _short_and_silent(answer: bytes, statuses: tuple[bytes, ...]) -> None:
    head = answer.split(b"\r\n", 1)[0]
    assert any(head.find(status) > 0 for status in statuses), answer[:200]
    assert len(answer) < 3000 and b"x" * 400 not in answer and b"y" * 400 not in answer


def test_a_long_id_gets_a_short_404(dashboard: Served) -> None:
    for path in (f"/api/sweeps/{'x' * 10_000}", f"/sweeps/{'x' * 10_000}", f"/sweeps/{SWEEP}/trials/{'y' * 10_000}"):
        _short_and_silent(_raw_get(dashboard.port, path), (b" 404 ",))


def test_a_100_kb_id_gets_a_short_answer(dashboard: Served) -> None:
    """Past the 16 KiB request head h11 refuses the request (400) once it has read that much of it
    unfinished; had it all come in one read, the route's 404. Either is short, and never echoes the id."""
    for path in (f"/api/sweeps/{'x' * 100_000}", f"/sweeps/{'x' * 100_000}", f"/sweeps/{SWEEP}/trials/{'y' * 100_000}"):
        answer = _raw_get(dashboard.port, path)
        if answer:  # a server that closed with the request unread may have been reset before its answer arrived
            _short_and_silent(answer, (b" 400 ", b" 404 "))
