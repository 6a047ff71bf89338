"""A real browser for the reporter's pages: Debian's chromium driven by
Playwright (never a downloaded browser), one per test module."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("SPOTSWEEP_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Headless, and quiet: without the background-networking flags chromium keeps
# trying hosts this machine's closed network refuses.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed: `apt-get install -y chromium` (Debian; .ci/run does it) "
                    "or set SPOTSWEEP_TEST_CHROMIUM to a Chromium binary")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()
