"""``spotsweep report SWEEP --html FILE``: one self-contained file, checked as
text and opened from file:// in a real browser (Debian's chromium via
Playwright) with every network request refused."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "web"))
from dashseed import HOSTILE, add_sweep, add_trial, small_sweep  # noqa: E402

from spotsweep.cli import main  # noqa: E402
from spotsweep.services.reporter import html  # noqa: E402
from spotsweep.shared.db import Database  # noqa: E402

pytestmark = pytest.mark.integration
CLOSER = "</script><script>alert(1)</script>"


@pytest.fixture()
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    database.migrate()
    yield database
    database.close()


def _seed(db: Database) -> dict[str, str]:
    ids = small_sweep(db)
    ids[CLOSER] = add_trial(db, "web-test-1", 12, CLOSER, {"lr": 0.004, "opt": "adam", "layers": 5},
                            metrics={"val_loss": 2.5, "</script>": 1.0})
    return ids


def _data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="spotsweep-data">(.*?)</script>', page, re.S)
    assert match, "no inlined data"
    return json.loads(match.group(1))


def test_the_report_is_one_file_with_the_library_and_the_data_inlined(db: Database, database_url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _seed(db)
    monkeypatch.setenv("SPOTSWEEP_DATABASE_URL", database_url)
    out = tmp_path / "report.html"
    assert main(["report", "web-test-1", "--html", str(out), "--csv", str(tmp_path / "r.csv")]) == 0
    page = out.read_text()
    assert "<script src=" not in page and "<link rel=\"stylesheet\"" not in page and "http://" not in page.lower()[:2000]
    assert "echarts" in page and page.count('<script type="application/json"') == 1
    assert CLOSER not in page and "<script>alert" not in page  # escaped in the JSON and in the markup
    data = _data(page)
    assert sorted(t["trial_id"] for t in data["trials"]) == sorted(ids.values())
    assert CLOSER in {t["trial_name"] for t in data["trials"]}  # the same name, once parsed
    assert set(data["curves"]) == {"val_loss", "train_loss", "</script>"} and data["curves"]["val_loss"]["trials"]
    assert data["importance"]["params"] and data["best"]["points"]
    assert (tmp_path / "r.csv").exists()  # --csv stays


def test_an_unknown_sweep_is_a_clear_error(db: Database, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no sweep with id 'nope'"):
        html.render(db, "nope")
    add_sweep(db, "bare-1")  # a sweep with no trials yet still renders
    assert "bare-1" in html.render(db, "bare-1")


def test_script_json_never_closes_its_tag() -> None:
    text = str(html.script_json({"name": "</script><!-- & >"}))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><!-- & >"}


def test_the_report_draws_offline_from_file_url(db: Database, browser: Any, tmp_path: Path) -> None:
    ids = _seed(db)
    out = tmp_path / "report.html"
    html.write(db, "web-test-1", out)
    context = browser.new_context(viewport={"width": 1400, "height": 1800}, offline=True)
    requests: list[str] = []
    # the network is off, and any request but the file itself is refused
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
    page.goto(out.as_uri())
    page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
    page.wait_for_function("!document.getElementById('importance-note').textContent.includes('at least')")
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    shown = page.locator("#leaderboard tbody tr").evaluate_all("rs => rs.map(r => r.dataset.trial)")
    assert sorted(shown) == sorted(ids.values())
    names = page.locator("#leaderboard tbody span.name").all_inner_texts()
    assert HOSTILE in names and CLOSER in names and len(names) == len(ids)  # text, not tags
    for chart in ("curves", "best-chart", "parallel", "importance", "interactions"):
        assert page.locator(f"#{chart} canvas").count() >= 1, chart
    page.select_option("#curve-metric", "train_loss")  # another metric's curves are in the file too
    page.wait_for_function("document.getElementById('curve-note').textContent.includes('trial')")
    assert errors == []
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    context.close()
