"""Learning curves by step, by time or by tokens (issue 31): the API gives each
point's seconds since the trial's start and, where the sweep reports a tokens
metric, its tokens; the sweep page's x selector draws them, and says when no
tokens metric is reported. Over a real PostgreSQL, in Debian's chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from dashseed import SPEC, T0, Dashboard, add_sweep, add_trial, small_sweep

from spotsweep.services.reporter.web.curves import tokens_metric

pytestmark = pytest.mark.integration
SWEEP = "tokens-1"


def test_the_tokens_metric_is_found_by_its_name() -> None:
    assert tokens_metric(["loss", "tokens_seen", "train/tokens"]) == "tokens_seen"
    assert tokens_metric(["loss", "train/tokens"]) == "train/tokens"
    assert tokens_metric(["loss", "tokens_per_s"]) is None  # a rate is not a count


def tokens_sweep(dashboard: Dashboard) -> dict[str, str]:
    """Two completed trials started at T0 + 10 s: ``a`` reports loss and
    tokens_seen (4,096 a step) a point every 2 s, resumed by attempt 2 at step 5;
    ``b`` reports loss only."""
    add_sweep(dashboard.db, SWEEP, {**SPEC, "name": "tokens"}, state="completed")
    a = add_trial(dashboard.db, SWEEP, 0, "a", {"lr": 0.01, "opt": "adam", "layers": 2},
                  metrics={"val_loss": 1.0, "tokens_seen": 36864.0}, started=10)  # final metrics: every name's last value
    b = add_trial(dashboard.db, SWEEP, 1, "b", {"lr": 0.02, "opt": "adam", "layers": 2}, metrics={"val_loss": 2.0},
                  started=10)
    rows = []
    for step in range(10):
        at = T0 + timedelta(seconds=10 + 2 * step)
        attempt = 2 if step >= 5 else 1
        rows += [(a, attempt, step, "val_loss", 1.0 + 1 / (1 + step), at), (a, attempt, step, "tokens_seen", 4096.0 * step, at),
                 (b, 1, step, "val_loss", 2.0 + 1 / (1 + step), at)]
    with dashboard.db.transaction() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO points (sweep_id, trial_id, attempt, step, name, value, recorded_at)"
                        f" VALUES ('{SWEEP}', %s, %s, %s, %s, %s, %s)", rows)
    return {"a": a, "b": b}


def test_curves_carry_seconds_since_the_start_and_tokens(dashboard: Dashboard) -> None:
    ids = tokens_sweep(dashboard)
    sweep = httpx.get(f"{dashboard.url}/api/sweeps/{SWEEP}", timeout=30).json()
    assert sweep["tokens_metric"] == "tokens_seen"
    body = httpx.get(f"{dashboard.url}/api/sweeps/{SWEEP}/curves?metric=val_loss&tokens=tokens_seen", timeout=30).json()
    a, b = (next(t for t in body["trials"] if t["trial_id"] == ids[n]) for n in ("a", "b"))
    assert a["seconds"] == [2.0 * s for s in range(10)]
    assert a["tokens"] == [4096.0 * s for s in range(10)]
    assert a["resumes"] == [[5, 2, 10.0, 20480.0]]
    assert b["tokens"] == [None] * 10  # b reports no tokens
    plain = httpx.get(f"{dashboard.url}/api/sweeps/{SWEEP}/curves?metric=val_loss", timeout=30).json()
    assert all("tokens" not in t for t in plain["trials"])


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    yield pg
    context.close()


def chart(page: Any) -> dict[str, Any]:
    """The curves chart's x axis name and each series' (name, first point's x)."""
    return page.evaluate("""() => { const o = echarts.getInstanceByDom(document.getElementById('curves')).getOption();
        return {x: o.xAxis[0].name, series: o.series.map(s => [s.name, s.data.length ? s.data[0][0] : null, s.data.length])}; }""")


def test_the_sweep_page_draws_curves_by_time_and_by_tokens(dashboard: Dashboard, page: Any) -> None:
    tokens_sweep(dashboard)
    page.goto(f"{dashboard.url}/sweeps/{SWEEP}")
    page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
    assert chart(page)["x"] == "step"
    page.select_option("#curve-x", "time")
    page.wait_for_function("echarts.getInstanceByDom(document.getElementById('curves')).getOption().xAxis[0].name"
                           ".startsWith('time')")
    drawn = chart(page)
    assert drawn["x"] == "time since the trial's start (s)" and sorted(drawn["series"]) == [["a", 0, 10], ["b", 0, 10]]
    page.select_option("#curve-x", "tokens")
    page.wait_for_function("document.getElementById('curve-note').textContent.includes('without tokens_seen')")
    drawn = chart(page)
    assert drawn["x"] == "tokens_seen" and drawn["series"] == [["a", 0, 10]]  # b reports none: not drawn, and said
    assert page.errors == []


def test_a_sweep_without_tokens_says_so_in_the_x_selector(dashboard: Dashboard, page: Any) -> None:
    small_sweep(dashboard.db)
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
    option = page.locator("#curve-x option[value=tokens]")
    assert option.is_disabled() and option.inner_text() == "tokens: none reported"
    assert page.errors == []
