"""The dashboard in a real browser: Debian's chromium driven by Playwright.

Skipped, saying how to enable it, where chromium is missing (``.ci/run``
installs it). Screenshots go under each test's tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dashseed import HOSTILE, T0, Dashboard, add_points, add_sweep, add_trial, fleet_sweep, small_sweep

from spotsweep.shared.db.journal import journal
from spotsweep.shared.messages import TrialFinished, TrialStarted

pytestmark = pytest.mark.integration



@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1800})
    pg = context.new_page()
    pg.errors = []  # console errors and uncaught exceptions, checked by each test
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("dialog", lambda d: (pg.errors.append("dialog: " + d.message), d.dismiss()))  # an alert() would be script run
    yield pg
    context.close()


def refreshed(pg: Any, at_least: int = 1) -> None:
    pg.wait_for_function(f"Number(document.body.dataset.refreshed || 0) >= {at_least}", timeout=20_000)


def test_the_sweep_page_lists_every_trial_draws_its_charts_and_updates_live(dashboard: Dashboard, page: Any,
                                                                           tmp_path: Path) -> None:
    ids = small_sweep(dashboard.db)
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    refreshed(page)
    rows = page.locator("#leaderboard tbody tr")
    assert rows.count() == len(ids)
    assert sorted(page.locator("#leaderboard tbody tr").evaluate_all("rs => rs.map(r => r.dataset.trial)")) == sorted(ids.values())
    assert page.locator("#leaderboard tbody a", has_text=HOSTILE).count() == 1  # the name is text, not a tag
    for chart in ("curves", "best-chart", "parallel", "importance", "interactions"):
        assert page.locator(f"#{chart} canvas").count() >= 1, chart
    page.wait_for_function("!document.getElementById('importance-note').textContent.includes('at least')")
    assert page.locator("#seeds-card").is_hidden()  # one seed per config: nothing to average
    assert page.locator("#cost canvas").count() >= 1 and "no pricing" in page.inner_text("#cost-note")
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)

    # filter and sort
    page.fill("#filter", "exp_00")
    assert rows.count() == 7  # exp_000..exp_007 less the hostile index 3
    page.fill("#filter", "")
    page.click("#leaderboard th:has-text('lr')")
    lrs = [float(x) for x in page.locator("#leaderboard tbody tr td:nth-child(5)").all_inner_texts()]  # pin, #, trial, state, lr
    assert lrs == sorted(lrs)
    page.click("#leaderboard th:has-text('#')")  # back to the ranking

    # a trial finishes while the page is open: it appears without a reload
    before = int(page.evaluate("document.body.dataset.refreshed"))
    new = add_trial(dashboard.db, "web-test-1", 11, "exp_late", {"lr": 0.003, "opt": "adam", "layers": 2},
                    metrics={"val_loss": 0.5})
    add_points(dashboard.db, "web-test-1", [(new, 1, s, "val_loss", 0.5 + 1 / (1 + s)) for s in range(100)])
    page.wait_for_selector(f"#leaderboard tbody tr[data-trial='{new}']", timeout=15_000)
    # The table is drawn before the refresh's charts finish and count it: wait for the count.
    page.wait_for_function(f"Number(document.body.dataset.refreshed) > {before}", timeout=15_000)
    assert page.locator("#leaderboard tbody tr").first.get_attribute("data-trial") == new  # the new best ranks first
    page.screenshot(path=str(tmp_path / "sweep-updated.png"), full_page=True)
    assert page.errors == []


def test_seeds_cost_the_timeline_and_resource_use_are_drawn(dashboard: Dashboard, page: Any, tmp_path: Path) -> None:
    fleet_sweep(dashboard.db)
    page.goto(f"{dashboard.url}/sweeps/fleet-1")
    refreshed(page)
    assert page.locator("#seeds-card").is_visible()
    assert page.locator("#seeds-table tbody tr").count() == 6
    assert page.locator("#seeds-table tbody tr").first.inner_text().split("\t")[1] == "lr=0.01 opt=adam"
    for chart in ("seeds", "best-gpu", "cost", "timeline"):
        assert page.locator(f"#{chart} canvas").count() >= 1, chart
    assert page.locator("#resources .chart canvas").count() == 2  # sys/cpu_percent and sys/rss_mb
    assert "saved 12.00 (67%)" in page.inner_text("#cost-note")
    assert "19 runs on 3 slots" in page.inner_text("#timeline-note")
    page.screenshot(path=str(tmp_path / "panels.png"), full_page=True)
    assert page.errors == []


def test_a_trial_page_opens_from_the_leaderboard_with_its_curves(dashboard: Dashboard, page: Any, tmp_path: Path) -> None:
    ids = small_sweep(dashboard.db)
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    refreshed(page)
    page.click("#leaderboard tbody a:has-text('exp_005')")
    page.wait_for_url(f"**/trials/{ids['exp_005']}")
    refreshed(page)
    assert page.locator("#trial-curves .chart canvas").count() == 2  # train_loss and val_loss
    assert "attempts 2" in page.inner_text("main") and "preemptions 1" in page.inner_text("main")
    page.screenshot(path=str(tmp_path / "trial.png"), full_page=True)
    assert page.errors == []


def test_non_finite_values_read_as_the_cli_writes_them_and_rank_last(dashboard: Dashboard, page: Any) -> None:
    small_sweep(dashboard.db)
    diverged = add_trial(dashboard.db, "web-test-1", 12, "exp_diverged", {"lr": 0.3, "opt": "sgd", "layers": 2},
                         metrics={"val_loss": "-Infinity"})  # a diverged loss, stored as the trial contract writes it
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    refreshed(page)
    row = page.locator(f"#leaderboard tbody tr[data-trial='{diverged}']").inner_text()
    assert "-inf" in row and "Infinity" not in row, row
    order = page.locator("#leaderboard tbody tr").evaluate_all("rs => rs.map(r => [r.dataset.trial, r.innerText])")
    at = [t for t, _ in order].index(diverged)
    ranks = [text.split("\t")[1] for _, text in order]  # after the pin box
    assert ranks[at] == "" and all(ranks[:at]) and not any(ranks[at:]), order  # unranked, after every ranked trial
    assert page.errors == []


def test_a_trial_named_like_a_script_tag_is_text(dashboard: Dashboard, page: Any, tmp_path: Path) -> None:
    ids = small_sweep(dashboard.db)
    for trial in (ids[HOSTILE], ids["exp_failed"]):
        page.goto(f"{dashboard.url}/sweeps/web-test-1/trials/{trial}")
        refreshed(page)
    assert HOSTILE in page.inner_text("#error")
    page.goto(f"{dashboard.url}/sweeps/web-test-1/trials/{ids[HOSTILE]}")
    assert page.inner_text("#trial-name").startswith(HOSTILE)
    assert page.locator("main script").count() == 0
    page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
    assert page.errors == []


def test_unknown_ids_show_a_404_page_and_the_index_lists_sweeps(dashboard: Dashboard, page: Any) -> None:
    small_sweep(dashboard.db)
    response = page.goto(f"{dashboard.url}/sweeps/nope")
    assert response.status == 404 and "no sweep with id 'nope'" in page.inner_text("main")
    page.goto(dashboard.url + "/")
    assert page.locator("#sweeps tbody a", has_text="web-test").count() == 1


def test_a_run_whose_agent_vanished_ends_lost_on_the_timeline(dashboard: Dashboard, page: Any) -> None:
    fleet_sweep(dashboard.db)
    tid = add_trial(dashboard.db, "fleet-1", 18, "fleet_lost", {"lr": 0.01, "opt": "adam", "seed": 0}, attempt=1,
                    metrics={"val_loss": 1.0}, started=0, finished=1500, agent="node-b")
    with dashboard.db.transaction() as conn:  # vm-gone was killed (kill -9): no end; the broker redelivered to node-b
        journal(conn, [TrialStarted(sweep_id="fleet-1", trial_id=tid, attempt=1, agent="vm-gone", run_id="r18a",
                                    time=T0),
                       TrialStarted(sweep_id="fleet-1", trial_id=tid, attempt=1, agent="node-b", run_id="r18b",
                                    redelivered=True, losses=1, staging=30.0, time=T0 + timedelta(seconds=900)),
                       TrialFinished(sweep_id="fleet-1", trial_id=tid, attempt=1, agent="node-b", run_id="r18b",
                                     outcome="completed", duration=600, time=T0 + timedelta(seconds=1500))])
    page.goto(f"{dashboard.url}/sweeps/fleet-1")
    refreshed(page)
    timeline = page.evaluate("fetch('/api/sweeps/fleet-1/timeline').then(r => r.json())")
    lost = [r for r in timeline["runs"] if r["trial_id"] == tid and r["agent"] == "vm-gone"]
    assert [(r["outcome"], r["end"] is not None, r["note"]) for r in lost] == [("lost", True, "lost: agent vm-gone vanished")]
    assert "fleet_lost attempt 1: lost: agent vm-gone vanished" in page.inner_text("#timeline-note")
    add_points(dashboard.db, "fleet-1", [(tid, 1, sec, "sys/cpu_percent", 50.0) for sec in (5, 10)])  # no metric step
    page.goto(f"{dashboard.url}/sweeps/fleet-1/trials/{tid}")
    refreshed(page)
    assert "lost: agent vm-gone vanished" in page.inner_text(".lost-run")
    assert page.locator("table.grid").nth(2).locator("tbody td").nth(1).inner_text() == "none"  # sys/ seconds are no steps
    assert page.errors == []


def test_a_page_opened_before_the_first_point_follows_the_objective_shows_running_values_and_says_when_it_is_cut_off(
        dashboard: Dashboard, page: Any) -> None:
    add_sweep(dashboard.db, "live-1")
    tid = add_trial(dashboard.db, "live-1", 0, "exp_live", {"lr": 0.01, "opt": "adam", "layers": 2}, state="running")
    page.goto(f"{dashboard.url}/sweeps/live-1")
    refreshed(page)
    assert "live, refreshed every" in page.inner_text("#live")
    add_points(dashboard.db, "live-1", [(tid, 1, s, "sys/cpu_percent", 90.0) for s in (0, 5)])  # the agent's samples come first
    page.wait_for_function("document.getElementById('curve-metric').options.length === 1", timeout=15_000)
    add_points(dashboard.db, "live-1", [(tid, 1, s, "val_loss", 2.0 - s / 1000) for s in range(3)])
    page.wait_for_function("document.getElementById('curve-metric').options.length === 2", timeout=15_000)
    assert page.eval_on_selector("#curve-metric", "s => s.value") == "val_loss"  # the objective, not the first metric seen
    cell = page.locator(f"#leaderboard tbody tr[data-trial='{tid}'] td.latest")
    cell.first.wait_for(timeout=15_000)
    assert cell.first.inner_text() == "1.998" and "running" in cell.first.get_attribute("title")
    page.select_option("#curve-metric", "sys/cpu_percent")  # the user's choice stays
    add_points(dashboard.db, "live-1", [(tid, 1, 1, "train_loss", 1.0)])
    page.wait_for_function("document.getElementById('curve-metric').options.length === 3", timeout=15_000)
    assert page.eval_on_selector("#curve-metric", "s => s.value") == "sys/cpu_percent"

    page.goto(f"{dashboard.url}/sweeps/live-1/trials/{tid}")
    refreshed(page)
    assert "Latest values" in page.inner_text("#metrics-title") and "1.998" in page.inner_text("#metrics")

    page.goto(f"{dashboard.url}/sweeps/live-1")
    refreshed(page)
    dashboard.stop()
    page.wait_for_function("document.getElementById('live').textContent.includes('disconnected')", timeout=15_000)
    assert "live, refreshed" not in page.inner_text("#live")
    assert all("refresh failed" in e or "Failed to load" in e or "ERR_CONNECTION" in e for e in page.errors), page.errors


def test_a_finished_sweep_says_it_is_over(dashboard: Dashboard, page: Any) -> None:
    add_sweep(dashboard.db, "over-1", state="completed")
    page.goto(f"{dashboard.url}/sweeps/over-1")
    refreshed(page)
    assert page.inner_text("#live") == "· sweep over"


def test_single_point_curves_show_markers_values_read_by_magnitude_and_a_cpu_sweep_counts_slot_hours(
        dashboard: Dashboard, page: Any, tmp_path: Path) -> None:
    spec = {"name": "asha-cpu", "command": ["python", "t.py"], "metric": {"name": "val_loss", "mode": "min"},
            "space": {"lr": [0.0003, 0.001]}, "strategy": {"type": "grid"}, "resources": {"gpus": 0},
            "env": {"API_TOKEN": "s3cret"}}
    add_sweep(dashboard.db, "cpu-1", spec)
    for i, lr in enumerate((0.00030000000000000003, 0.001)):  # one rung each: one point per curve
        tid = add_trial(dashboard.db, "cpu-1", i, f"t{i}", {"lr": lr, "batch": 32}, metrics={"val_loss": 9407.528162191118 + i},
                        run_seconds=3600)
        add_points(dashboard.db, "cpu-1", [(tid, 1, 10, "val_loss", 9407.528162191118 + i)])
    page.goto(f"{dashboard.url}/sweeps/cpu-1")
    refreshed(page)
    shown = page.evaluate("echarts.getInstanceByDom(document.getElementById('curves')).getOption().series"
                          ".map(s => [s.data.length, s.showSymbol])")
    assert shown == [[1, True], [1, True]]
    page.check("#hide-constant")  # batch is 32 everywhere: its column goes
    page.wait_for_function("![...document.querySelectorAll('#leaderboard th')].some(th => th.textContent === 'batch')")
    first = page.locator("#leaderboard tbody tr").first
    assert first.locator("td").nth(4).inner_text() == "3e-4" and first.locator("td").nth(5).inner_text() == "9408"
    assert first.locator("td").nth(5).get_attribute("title") == "9407.528162191118"  # the exact value on hover
    assert "slot-h" in page.inner_text("#cost-note") and "GPU" not in page.inner_text("#cost-note")
    assert page.inner_text("#best-gpu-title") == "Best so far against slot-hours"
    spec_text = page.inner_text("#spec") if page.locator("#spec").is_visible() else page.text_content("#spec")
    assert "API_TOKEN" in spec_text and "s3cret" not in spec_text  # env values are hidden
    page.check("#curve-log")
    page.wait_for_function("echarts.getInstanceByDom(document.getElementById('curves')).getOption().yAxis[0].type === 'log'")
    with page.expect_download() as download:
        page.click("#csv")
    rows = Path(download.value.path()).read_text().splitlines()
    assert rows[0].startswith("#,trial,state,lr,val_loss")  # the shown columns and "0.00030000000000000003" in rows[1] and len(rows) == 3
    assert page.errors == []


def test_pinned_trials_compare_side_by_side_and_alone_on_the_curves_and_constant_params_hide(
        dashboard: Dashboard, page: Any) -> None:
    ids = small_sweep(dashboard.db)
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    refreshed(page)
    assert page.locator("#compare-card").is_hidden()
    for name in ("exp_001", "exp_002"):
        page.locator(f"#leaderboard tbody tr[data-trial='{ids[name]}'] input[type=checkbox]").check()
    page.wait_for_function("document.getElementById('curve-note').textContent.startsWith('2 trial(s)')", timeout=15_000)
    assert "pinned" in page.inner_text("#curve-note")
    assert page.locator("#compare-card").is_visible()
    heads = page.locator("#compare thead th").all_inner_texts()
    assert sorted(heads[1:]) == ["exp_001", "exp_002"]
    assert page.locator("#compare tbody th.differs").all_inner_texts()[:3] == ["layers", "lr", "opt"]  # all three differ
    series = page.evaluate("echarts.getInstanceByDom(document.getElementById('curves')).getOption().series.map(s => s.name)")
    assert sorted(series) == ["exp_001", "exp_002"]
    page.goto(f"{dashboard.url}/sweeps/web-test-1/trials/{ids['exp_002']}")
    assert page.inner_text("#command") == "python train.py --lr 0.001"  # the command line the agent ran
    assert page.errors == []


def test_a_median_stopped_sweep_shows_its_pruned_runs_pruned_and_no_lost_run(dashboard: Dashboard, page: Any) -> None:
    """Early stopping stops a run and its agent sends no end: the run ends pruned, never brown "lost"."""
    add_sweep(dashboard.db, "median-1")
    starts, ids = [], []
    for i in range(4):
        pruned = i > 0
        tid = add_trial(dashboard.db, "median-1", i, f"m{i}", {"lr": 0.01, "opt": "adam", "layers": 2},
                        state="pruned" if pruned else "completed", metrics={"val_loss": 2.0 + i}, started=0, finished=300,
                        error="early stopping: val_loss 3 at step 40 is worse than the median 2.5" if pruned else None)
        ids.append(tid)
        starts.append(TrialStarted(sweep_id="median-1", trial_id=tid, attempt=1, agent="node-a", run_id=f"r{i}", time=T0))
        if not pruned:
            starts.append(TrialFinished(sweep_id="median-1", trial_id=tid, attempt=1, agent="node-a", run_id=f"r{i}",
                                        outcome="completed", duration=300, time=T0 + timedelta(seconds=300)))
    with dashboard.db.transaction() as conn:
        conn.execute("UPDATE trials SET finished_at = %s WHERE sweep_id = 'median-1'", (T0 + timedelta(seconds=200),))
        journal(conn, starts)
    page.goto(f"{dashboard.url}/sweeps/median-1")
    refreshed(page)
    timeline = page.evaluate("fetch('/api/sweeps/median-1/timeline').then(r => r.json())")
    assert sorted(r["outcome"] for r in timeline["runs"]) == ["completed", "pruned", "pruned", "pruned"]
    colours = page.evaluate("echarts.getInstanceByDom(document.getElementById('timeline')).getOption().series[0].data"
                            ".map(d => d.itemStyle.color)")
    assert "#9c755f" not in colours and colours.count("#edc948") == 3  # no brown run; pruned ones yellow
    assert "lost" not in page.inner_text("#timeline-note").replace("brown: lost", "")
    page.goto(f"{dashboard.url}/sweeps/median-1/trials/{ids[1]}")
    refreshed(page)
    assert page.locator(".lost-run").count() == 0 and "pruned" in page.inner_text("#trial-name")
    assert page.errors == []


def test_the_leaderboard_ranks_no_smoke_trial(dashboard: Dashboard, page: Any) -> None:
    """The smoke stage is not part of the comparison (docs/search.md, ``spotsweep report``): listed last, unranked."""
    ids = small_sweep(dashboard.db)
    smoke = add_trial(dashboard.db, "web-test-1", -1, "smoke_0", {"lr": 0.003, "opt": "adam", "layers": 2},
                      metrics={"val_loss": 0.01})  # the best value of all, at the smoke budget
    page.goto(f"{dashboard.url}/sweeps/web-test-1")
    refreshed(page)
    order = page.locator("#leaderboard tbody tr").evaluate_all("rs => rs.map(r => [r.dataset.trial, r.innerText])")
    ranks = {t: text.split("\t")[1] for t, text in order}
    assert ranks[smoke] == "" and order[0][0] != smoke and "smoke" in dict(order)[smoke]
    assert sorted(int(r) for t, r in ranks.items() if r) == list(range(1, 9))  # the 8 finite completed trials: 1..8
    assert ranks[ids["exp_000"]] != ""
    assert page.errors == []


def test_the_sweep_list_shows_why_a_sweep_failed_or_was_rejected(dashboard: Dashboard, page: Any) -> None:
    add_sweep(dashboard.db, "broken-1", state="failed")
    add_sweep(dashboard.db, "refused-1", state="rejected")
    add_sweep(dashboard.db, "live-2")
    with dashboard.db.transaction() as conn:
        conn.execute("UPDATE sweeps SET error = 'smoke trial 0 failed: exit 1' WHERE sweep_id = 'broken-1'")
        conn.execute("UPDATE sweeps SET error = 'space.lr: low must be > 0 (got 0)' WHERE sweep_id = 'refused-1'")
    page.goto(dashboard.url + "/")
    rows = {r[0]: r[1] for r in page.locator("#sweeps tbody tr").evaluate_all(
        "rs => rs.map(r => [r.querySelector('.mono').textContent, r.innerText])")}
    assert "smoke trial 0 failed: exit 1" in rows["broken-1"] and "low must be > 0" in rows["refused-1"]
    assert page.locator("#sweeps .reason").count() == 2
    page.wait_for_timeout(3500)  # the table's own refresh draws the reasons too
    assert page.locator("#sweeps .reason").count() == 2
    assert page.errors == []


def test_the_trial_page_fits_1400_px_with_long_event_details(dashboard: Dashboard, page: Any, tmp_path: Path) -> None:
    add_sweep(dashboard.db, "wide-1")
    tid = add_trial(dashboard.db, "wide-1", 0, "wide", {"lr": 0.01, "opt": "adam", "layers": 2}, state="failed",
                    error="boom")
    long = "/var/lib/spotsweep/runs/" + "x" * 280  # a path: no space to break at
    with dashboard.db.transaction() as conn:
        journal(conn, [TrialStarted(sweep_id="wide-1", trial_id=tid, attempt=1, agent="node-a", run_id="r0", time=T0),
                       TrialFinished(sweep_id="wide-1", trial_id=tid, attempt=1, agent="node-a", run_id="r0",
                                     outcome="failed", error=long, duration=5, time=T0 + timedelta(seconds=5))])
    page.goto(f"{dashboard.url}/sweeps/wide-1/trials/{tid}")
    refreshed(page)
    page.screenshot(path=str(tmp_path / "wide.png"), full_page=True)
    assert page.evaluate("document.getElementById('events').scrollWidth") <= 1400
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    assert page.errors == []


def test_attempt_labels_close_together_on_a_sys_chart_are_thinned_so_none_overlaps(dashboard: Dashboard, page: Any) -> None:
    """A sys/ chart's x is seconds: attempts a few seconds apart drew their labels over each other (issue 40).
    Every attempt keeps its dashed line; a label shows only at least LABEL_GAP (16) px from the last one shown."""
    add_sweep(dashboard.db, "resumed-1")
    tid = add_trial(dashboard.db, "resumed-1", 0, "churn", {"lr": 0.01, "opt": "adam", "layers": 2}, attempt=8)
    rows = [(tid, 1, second, "sys/rss_mb", 100.0) for second in range(0, 2400, 10)]  # a long first attempt,
    rows += [(tid, attempt, second, "sys/rss_mb", 100.0 + second) for attempt in range(2, 9)  # then requeues 3 s apart
             for second in range(2400 + attempt * 3, 2400 + attempt * 3 + 3)]
    add_points(dashboard.db, "resumed-1", rows)
    page.goto(f"{dashboard.url}/sweeps/resumed-1/trials/{tid}")
    refreshed(page)
    node = "document.querySelector(\"[data-metric='sys/rss_mb']\")"
    page.wait_for_function(f"(() => {{ const c = echarts.getInstanceByDom({node}); return c && c.getOption().series.length"
                           " && c.getOption().series[0].markLine; })()", timeout=15_000)
    lines = page.evaluate(f"""(() => {{ const c = echarts.getInstanceByDom({node});
        return c.getOption().series[0].markLine.data.map(d => [c.convertToPixel({{xAxisIndex: 0}}, d.xAxis), d.label.show]); }})()""")
    assert len(lines) == 7  # attempts 2..8 each start a dashed line
    shown = [x for x, show in lines if show]
    assert 1 <= len(shown) < 7 and lines[0][1]  # thinned, the first always labelled
    assert all(b - a >= 16 for a, b in zip(shown, shown[1:])), lines
    assert page.errors == []
