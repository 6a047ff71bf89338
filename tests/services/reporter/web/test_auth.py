"""The dashboard's token (issue 28, item 5) and its request limits, over a real PostgreSQL:
401 without the token on pages and the API, a bearer header or the login form's cookie
let a reader in, a dashboard beyond loopback without a token refuses to start; the
login form in Debian's chromium; the concurrency cap's 503; a huge id's short 404."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from dashseed import add_sweep
from servers import free_port, wait_port
from starlette.testclient import TestClient

from spotsweep.services.reporter.web.app import make_app
from spotsweep.services.reporter.web.guard import COOKIE, Admission, exposure
from spotsweep.services.reporter.web.main import options
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError

pytestmark = pytest.mark.integration
TOKEN = "correct-horse-battery-staple"
SWEEP = "auth-test-1"


@pytest.fixture()
def db(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    db.migrate()
    add_sweep(db, SWEEP)
    yield db
    db.close()


@pytest.fixture()
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(make_app(db, token=TOKEN), follow_redirects=False) as c:
        yield c


def test_without_the_token_pages_and_the_api_answer_401(client: TestClient) -> None:
    for path in ("/", f"/sweeps/{SWEEP}", "/api/sweeps", f"/api/sweeps/{SWEEP}/trials", "/metrics"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert "web-test" not in r.text and "train.py" not in r.text  # nothing of the sweep
        assert "Bearer" in r.headers["www-authenticate"]
    assert 'name="token"' in client.get(f"/sweeps/{SWEEP}").text  # a page answers with the login form
    assert client.get("/api/sweeps").json()["error"].startswith("give the dashboard's token")
    wrong = {"Authorization": "Bearer not-the-token"}
    assert client.get("/api/sweeps", headers=wrong).status_code == 401
    assert client.get("/", cookies={COOKIE: TOKEN}).status_code == 401  # the cookie is not the token itself
    assert client.get("/healthz").status_code == 200  # the kubelet's probes need none


def test_a_bearer_token_reads_the_api_and_the_pages(client: TestClient) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert [s["sweep_id"] for s in client.get("/api/sweeps", headers=bearer).json()] == [SWEEP]
    assert client.get(f"/sweeps/{SWEEP}", headers=bearer).status_code == 200


def test_the_login_form_sets_an_httponly_strict_cookie_that_lets_the_browser_in(client: TestClient) -> None:
    refused = client.post("/login", data={"token": "guess", "next": f"/sweeps/{SWEEP}"})
    assert refused.status_code == 401 and "Wrong token" in refused.text and "set-cookie" not in refused.headers
    r = client.post("/login", data={"token": TOKEN, "next": f"/sweeps/{SWEEP}"})
    assert r.status_code == 303 and r.headers["location"] == f"/sweeps/{SWEEP}"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert client.get(f"/sweeps/{SWEEP}").status_code == 200  # the client kept the cookie
    assert client.get("/api/sweeps").status_code == 200
    assert client.get("/login").headers["location"] == "/"
    elsewhere = client.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
    assert elsewhere.headers["location"] == "/"  # never a redirect off the site


def test_on_loopback_no_token_is_needed(db: Database) -> None:
    with TestClient(make_app(db)) as c:
        assert c.get("/").status_code == 200 and c.get("/api/sweeps").status_code == 200


def test_beyond_loopback_it_needs_a_token_or_insecure() -> None:
    assert exposure("127.0.0.1", None, False) is None and exposure("::1", None, False) is None
    assert exposure("localhost", None, False) is None and exposure("0.0.0.0", TOKEN, False) is None  # noqa: S104
    with pytest.raises(PermanentError, match="SPOTSWEEP_DASHBOARD_TOKEN"):
        exposure("0.0.0.0", None, False)  # noqa: S104
    with pytest.raises(PermanentError):
        exposure("dashboard.example", None, False)  # a name may resolve to anything
    assert "--insecure" in (exposure("10.0.0.5", None, True) or "")


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return {**env, "SPOTSWEEP_HOME": str(tmp_path / "home"), **more}


def test_the_command_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "spotsweep", "dashboard", "--host", "0.0.0.0", "--port", str(free_port())],  # noqa: S104
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SPOTSWEEP_DASHBOARD_TOKEN" in lines[0] and "Traceback" not in done.stderr


def test_insecure_starts_beyond_loopback_and_says_so(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "dashboard", "--host", "0.0.0.0", "--port", str(port),  # noqa: S104
                             "--insecure"], env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/api/sweeps", timeout=5).status_code == 200
                break
            except httpx.HTTPError:
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
    err = proc.stderr.read() if proc.stderr else ""
    assert "dashboard.insecure" in err and "without a token" in err


def test_a_huge_id_gets_a_short_404(client: TestClient) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    huge = "x" * 60_000  # httpx sends at most 64 KiB of URL; tests/hostile sends 100 KB over a socket
    for path in (f"/api/sweeps/{huge}", f"/sweeps/{huge}", f"/api/sweeps/{SWEEP}/trials/{huge}"):
        r = client.get(path, headers=bearer)
        assert r.status_code == 404 and len(r.content) < 2000, path


def test_past_the_cap_requests_get_503_with_retry_after() -> None:
    release = asyncio.Event()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(app: Any, path: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "path": path, "method": "GET", "headers": []}, None, send)
        return sent

    async def main() -> None:
        app = Admission(slow, limit=2)
        first = [asyncio.create_task(call(app, "/api/sweeps")) for _ in range(2)]
        await asyncio.sleep(0.05)
        refused = await call(app, "/api/sweeps")
        assert refused[0]["status"] == 503 and (b"retry-after", b"2") in refused[0]["headers"]
        probe = asyncio.create_task(call(app, "/healthz"))  # probes are not counted, and wait like the rest
        release.set()
        assert [(await t)[0]["status"] for t in (*first, probe)] == [200, 200, 200]
        assert (await call(app, "/api/sweeps"))[0]["status"] == 200  # room again

    asyncio.run(main())


def test_the_login_form_in_a_browser(db: Database, browser: Any) -> None:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(db, token=TOKEN), **options("127.0.0.1", port)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_port(port)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/sweeps/{SWEEP}")
        page.fill("input[name=token]", "a wrong guess")
        page.click("button[type=submit]")
        assert "Wrong token" in page.content()
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(f"http://127.0.0.1:{port}/sweeps/{SWEEP}")
        assert page.locator("h1").first.inner_text() != "This dashboard asks for its token"
        cookie = next(c for c in context.cookies() if c["name"] == COOKIE)
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != TOKEN
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script on the page can read it
    finally:
        context.close()
        server.should_exit = True
        thread.join(10)
