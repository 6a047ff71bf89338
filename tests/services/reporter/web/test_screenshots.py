"""The screenshots docs/dashboard.md and the README show, taken at 1400 px
wide in Debian's chromium (as every browser test): a sweep's page, a trial's
page and the offline report. Each run writes them into docs/img/, so they are
always of the code that draws them; CI runs this as it runs the browser tests."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dashseed import RUN, T0, Dashboard, fleet_sweep

from spotsweep.services.reporter import html
from spotsweep.shared.db.journal import journal
from spotsweep.shared.messages import TrialFinished

pytestmark = pytest.mark.integration
IMG = Path(__file__).resolve().parents[4] / "docs" / "img"
WIDTH = 1400


def shoot(browser: Any, url: str, name: str) -> None:
    context = browser.new_context(viewport={"width": WIDTH, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("Number(document.body.dataset.refreshed || 0) >= 1", timeout=20_000)
    page.wait_for_timeout(300)  # let the charts finish their first frame (nothing is asserted on time)
    page.screenshot(path=str(IMG / name), full_page=True)
    context.close()
    assert errors == [], errors
    assert (IMG / name).stat().st_size > 10_000


def test_screenshots_of_the_sweep_page_a_trial_page_and_the_offline_report(dashboard: Dashboard, browser: Any,
                                                                          tmp_path: Path) -> None:
    ids = fleet_sweep(dashboard.db)
    with dashboard.db.transaction() as conn:  # its last trial ends: a finished sweep, its timeline not stretched to now
        journal(conn, [TrialFinished(sweep_id="fleet-1", trial_id=ids["fleet_17"], attempt=1, agent="node-b", run_id="r17",
                                     outcome="completed", duration=RUN, time=T0 + timedelta(seconds=10 * RUN))])
        conn.execute("UPDATE trials SET state = 'completed', metrics = '{\"val_loss\": 2.8}', finished_at = %s,"
                     " run_seconds = %s WHERE trial_id = %s", (T0 + timedelta(seconds=10 * RUN), RUN, ids["fleet_17"]))
        conn.execute("UPDATE sweeps SET state = 'completed', finished_at = %s WHERE sweep_id = 'fleet-1'",
                     (T0 + timedelta(seconds=10 * RUN),))
    shoot(browser, f"{dashboard.url}/sweeps/fleet-1", "dashboard-sweep.png")
    shoot(browser, f"{dashboard.url}/sweeps/fleet-1/trials/{ids['fleet_00']}", "dashboard-trial.png")
    report = tmp_path / "report.html"
    html.write(dashboard.db, "fleet-1", report)
    shoot(browser, report.as_uri(), "dashboard-report.png")
