"""Sweeps side by side (issue 31): ``/compare?sweeps=A,B`` draws each sweep's best
trial's objective on one chart with a table of their best values and params;
sweeps are named by id or name, ticked on the index; bad requests get one line.
Over a real PostgreSQL, in Debian's chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dashseed import SPEC, Dashboard, add_points, add_sweep, add_trial

pytestmark = pytest.mark.integration


def two_sweeps(dashboard: Dashboard) -> dict[str, str]:
    """``adam-run`` (objective val_loss, min) and ``sgd-run`` (objective acc, max, with a
    momentum param), each of three trials, one of them failed; and an older ``adam-run``."""
    db, ids = dashboard.db, {}
    add_sweep(db, "old-1", {**SPEC, "name": "adam-run"}, state="completed")
    add_sweep(db, "adam-2", {**SPEC, "name": "adam-run"}, state="completed")
    add_sweep(db, "sgd-3", {**SPEC, "name": "sgd-run", "metric": {"name": "acc", "mode": "max"}}, state="completed")
    with db.transaction() as conn:  # the newest of a name is the one a name means
        conn.execute("UPDATE sweeps SET created_at = created_at + interval '1 day' WHERE sweep_id IN ('adam-2', 'sgd-3')")
    points = []
    for i, loss in enumerate([0.9, 0.5, 0.7]):
        t = add_trial(db, "adam-2", i, f"adam_{i}", {"lr": 0.001 * (i + 1), "opt": "adam"}, metrics={"val_loss": loss})
        points += [(t, 1, s, "val_loss", loss + 1 / (1 + s)) for s in range(20)]
        ids[f"adam_{i}"] = t
    for i, acc in enumerate([0.8, 0.95, 0.6]):
        t = add_trial(db, "sgd-3", i, f"sgd_{i}", {"lr": 0.01, "opt": "sgd", "momentum": 0.9}, metrics={"acc": acc})
        add_points(db, "sgd-3", [(t, 1, s, "acc", acc - 0.5 / (1 + s)) for s in range(30)])
        ids[f"sgd_{i}"] = t
    add_trial(db, "sgd-3", 3, "sgd_failed", {"lr": 0.1, "opt": "sgd", "momentum": 0.0}, state="failed")
    add_points(db, "adam-2", points)
    return ids


def test_the_api_gives_each_sweeps_best_trial_by_id_or_name(dashboard: Dashboard) -> None:
    ids = two_sweeps(dashboard)
    body = httpx.get(f"{dashboard.url}/api/compare?sweeps=adam-run,sgd-3", timeout=30).json()
    assert [(s["sweep_id"], s["metric"], s["mode"]) for s in body["sweeps"]] == [("adam-2", "val_loss", "min"),
                                                                                 ("sgd-3", "acc", "max")]
    adam, sgd = (s["trials"] for s in body["sweeps"])
    assert [(t["trial_id"], t["value"]) for t in adam] == [(ids["adam_1"], 0.5)]
    assert [(t["trial_id"], t["value"]) for t in sgd] == [(ids["sgd_1"], 0.95)]
    assert len(adam[0]["points"]) == 20 and len(sgd[0]["points"]) == 30 and len(sgd[0]["seconds"]) == 30
    assert body["params"] == ["lr", "momentum", "opt"] and body["differs"] == ["lr", "momentum", "opt"]
    two = httpx.get(f"{dashboard.url}/api/compare?sweeps=adam-2,sgd-run&top=2", timeout=30).json()
    assert [len(s["trials"]) for s in two["sweeps"]] == [2, 2]


@pytest.mark.parametrize(("query", "status", "error"), [
    ("sweeps=adam-2", 400, "give two or more sweeps (ids or names): ?sweeps=A,B (got 1)"),
    ("sweeps=adam-2,nope", 404, "no sweep with id or name 'nope'"),
    ("sweeps=adam-2,sgd-3&top=0", 400, "top must be between 1 and 10 (got 0)"),
])
def test_a_bad_request_gets_one_line(dashboard: Dashboard, query: str, status: int, error: str) -> None:
    two_sweeps(dashboard)
    answer = httpx.get(f"{dashboard.url}/api/compare?{query}", timeout=30)
    assert (answer.status_code, answer.json()) == (status, {"error": error})
    if "top" not in query:  # the page shows the same error as a page
        page = httpx.get(f"{dashboard.url}/compare?{query}", timeout=30)
        assert page.status_code == status and error.replace("'", "&#39;") in page.text


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1200})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    yield pg
    context.close()


def test_sweeps_ticked_on_the_index_open_side_by_side(dashboard: Dashboard, page: Any) -> None:
    two_sweeps(dashboard)
    page.goto(f"{dashboard.url}/")
    assert page.locator("#compare").is_disabled()
    page.check("#sweeps input.pick[value='adam-2']")
    page.check("#sweeps input.pick[value='sgd-3']")
    page.click("#compare")
    page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
    assert page.url.endswith("/compare?sweeps=adam-2%2Csgd-3")
    series = page.evaluate("echarts.getInstanceByDom(document.getElementById('compare-curves')).getOption()"
                           ".series.map(s => [s.name, s.data.length])")
    assert series == [["adam-run: adam_1", 20], ["sgd-run: sgd_1", 30]]
    rows = page.locator("#compare-sweeps tbody tr")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.sweep)") == ["adam-2", "sgd-3"]
    assert rows.nth(1).inner_text().split("\t")[:6] == ["sgd-run", "sgd-3", "completed", "acc (max)", "0.95", "sgd_1"]
    assert page.locator("#compare-sweeps th.differs").all_inner_texts() == ["lr", "momentum", "opt"]
    assert "each sweep's own: val_loss, acc" in page.inner_text("#compare-note")
    assert page.errors == []
