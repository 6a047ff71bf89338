"""An attempt's whole log in the browser (issue 31): the trial page's link opens
its stdout and stderr, read a page at a time (never the whole log in one
request) and followed while the attempt runs; the raw stream downloads whole.
Over a real PostgreSQL, moto's S3 server and Debian's chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dashseed import HOSTILE, add_sweep, add_trial
from test_trial_page import db, s3, serve  # noqa: F401 - the fixtures of the trial page's tests

from spotsweep.services.reporter.web.logs import PAGE, page_end
from spotsweep.shared.artifacts import ArtifactStore, S3ArtifactStore
from spotsweep.shared.artifacts.checkpoint_layout import log_key
from spotsweep.shared.db import Database
from spotsweep.shared.settings import Settings

pytestmark = pytest.mark.integration
SWEEP = "log-test-1"


def test_a_page_ends_after_a_whole_line_or_a_whole_character() -> None:
    assert page_end(b"one\ntwo\nthr", more=True) == 8
    assert page_end(b"one\ntwo\nthr", more=False) == 11  # the log's end: all of it
    assert page_end("abcé".encode()[:-1], more=True) == 3  # inside é: before it
    assert page_end("abcé".encode(), more=True) == 5


class Counting(S3ArtifactStore):
    """moto's S3 store, recording the length of every ranged read the dashboard makes."""

    reads: list[int]

    def get_range(self, key: str, offset: int, length: int) -> tuple[bytes, int]:
        self.reads.append(length)
        return super().get_range(key, offset, length)


def big_log() -> bytes:
    return "".join(f"line {i} {'é' * 40}\n" for i in range(30_000)).encode()  # ~2.6 MB: several pages


@pytest.fixture()
def running_trial(db: Database, s3: ArtifactStore) -> Iterator[str]:  # noqa: F811
    add_sweep(db, SWEEP)
    trial_id = add_trial(db, SWEEP, 0, "exp_log", {"lr": 0.1, "opt": "adam", "layers": 2}, state="running")
    s3.put_bytes(log_key(SWEEP, trial_id, 1, "stdout"), big_log())
    s3.put_bytes(log_key(SWEEP, trial_id, 1, "stderr"), f"{HOSTILE}\n".encode())
    yield trial_id


def test_the_api_reads_a_log_a_page_at_a_time(db: Database, s3: ArtifactStore, running_trial: str) -> None:  # noqa: F811
    store = Counting.from_settings(Settings())  # the s3 fixture's settings
    assert isinstance(store, Counting)
    store.reads = []
    for url in serve(db, store):
        api = f"{url}/api/sweeps/{SWEEP}/trials/{running_trial}/log?attempt=1&stream=stdout"
        text, offset, pages = "", 0, 0
        while True:
            page = httpx.get(f"{api}&offset={offset}", timeout=30).json()
            assert page["running"] is True and page["text"].endswith("\n")
            text, offset, pages = text + page["text"], page["next"], pages + 1
            if offset >= page["size"]:
                break
        assert text.encode() == big_log() and pages >= 5
        assert max(store.reads) <= PAGE  # no request read more than a page
        raw = httpx.get(f"{url}/api/sweeps/{SWEEP}/trials/{running_trial}/log.txt?attempt=1&stream=stderr", timeout=30)
        assert raw.text == f"{HOSTILE}\n" and raw.headers["content-type"].startswith("text/plain")
        assert httpx.get(f"{api}&stream=nope", timeout=30).json() == {"error": "stream must be one of stdout, stderr (got 'nope')"}


def test_the_trial_pages_link_opens_the_whole_log_and_follows_it(db: Database, s3: ArtifactStore,  # noqa: F811
                                                                   running_trial: str, browser: Any) -> None:
    errors: list[str] = []
    for url in serve(db, s3):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/sweeps/{SWEEP}/trials/{running_trial}")
        page.click("#full-log")
        page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
        assert page.evaluate("document.getElementById('stdout').textContent") == big_log().decode()
        text = "document.getElementById('stderr').textContent"
        assert page.evaluate(text) == f"{HOSTILE}\n"  # text, not a tag
        s3.put_bytes(log_key(SWEEP, running_trial, 1, "stderr"), f"{HOSTILE}\nepoch 2 done\n".encode())  # the agent uploads more
        page.wait_for_function("document.getElementById('stderr').textContent.includes('epoch 2 done')", timeout=15_000)
        assert page.evaluate(text) == f"{HOSTILE}\nepoch 2 done\n"  # appended once, nothing read twice
        assert "live" in page.inner_text("#live")
        context.close()
        assert errors == []
