"""The JSON API and the pages against a real PostgreSQL, over HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from dashseed import HOSTILE, Dashboard, add_sweep, add_trial, small_sweep

pytestmark = pytest.mark.integration


def get(d: Dashboard, path: str, status: int = 200) -> Any:
    r = httpx.get(d.url + path, timeout=30)
    assert r.status_code == status, r.text
    if r.headers["content-type"].startswith("application/json"):
        return json.loads(r.text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    return r.text


def test_sweeps_trials_and_health(dashboard: Dashboard) -> None:
    ids = small_sweep(dashboard.db)
    assert get(dashboard, "/healthz") == {"ok": True}
    [sweep] = get(dashboard, "/api/sweeps")
    assert {k: sweep[k] for k in ("sweep_id", "name", "state", "counts")} == {
        "sweep_id": "web-test-1", "name": "web-test", "state": "running",
        "counts": {"completed": 9, "failed": 1, "running": 1}}
    trials = get(dashboard, "/api/sweeps/web-test-1/trials")
    assert {t["trial_id"] for t in trials} == set(ids.values())
    for t in trials:
        assert set(t) >= {"trial_id", "trial_name", "state", "params", "metrics", "attempts", "preemptions", "flags"}
    values = [t["metrics"]["val_loss"] for t in trials if t["rank"]]
    assert values == sorted(values) and len(values) == 8  # best first; the NaN trial has no rank
    nan = next(t for t in trials if t["trial_name"] == "exp_nan")
    assert nan["metrics"] == {"val_loss": "NaN", "train_loss": "Infinity"} and trials.index(nan) == 8  # after every finite one
    assert next(t for t in trials if t["trial_name"] == "exp_005")["preemptions"] == 1


def test_curves_are_downsampled_and_mark_the_resume(dashboard: Dashboard) -> None:
    ids = small_sweep(dashboard.db, steps=1000)
    body = get(dashboard, "/api/sweeps/web-test-1/curves?metric=val_loss&max_points=50")
    assert body["metric"] == "val_loss"
    by_name = {t["trial_name"]: t for t in body["trials"]}
    assert set(by_name) == set(ids)  # every trial (the failed one with no points)
    for t in body["trials"]:
        assert set(t) >= {"trial_id", "trial_name", "points"} and len(t["points"]) <= 50
    full = by_name["exp_000"]["points"]
    assert full[0][0] == 0 and full[-1][0] == 999  # the ends are kept
    assert [r[:2] for r in by_name["exp_005"]["resumes"]] == [[100, 2]]
    assert all(len(t["seconds"]) == len(t["points"]) and "tokens" not in t for t in body["trials"])  # no tokens metric
    assert ["NaN"] == [v for _, v in by_name["exp_nan"]["points"] if isinstance(v, str)]  # its first NaN, as the contract string
    one = get(dashboard, f"/api/sweeps/web-test-1/curves?metric=train_loss&trial={ids['exp_001']}&max_points=5000")
    assert [t["trial_id"] for t in one["trials"]] == [ids["exp_001"]] and len(one["trials"][0]["points"]) == 1000


def test_importance_answers_and_says_why_when_it_cannot(dashboard: Dashboard) -> None:
    small_sweep(dashboard.db)
    body = get(dashboard, "/api/sweeps/web-test-1/importance?metric=val_loss")
    assert body["metric"] == "val_loss" and {p["name"] for p in body["params"]} == {"lr", "opt", "layers"}
    shares = [p["importance"] for p in body["params"]]
    assert shares == sorted(shares, reverse=True)
    assert all(len(i["params"]) == 2 for i in body["interactions"])
    add_sweep(dashboard.db, "young")
    add_trial(dashboard.db, "young", 0, "t0", {"lr": 0.01, "opt": "adam", "layers": 3}, metrics={"val_loss": 1.0})
    young = get(dashboard, "/api/sweeps/young/importance")
    assert young["params"] == [] and young["interactions"] == [] and "at least 4" in young["reason"]


@pytest.mark.parametrize("path", ["/api/sweeps/nope", "/api/sweeps/nope/trials", "/api/sweeps/nope/importance",
                                  "/api/sweeps/nope/curves?metric=x", "/api/sweeps/web-test-1/trials/nope",
                                  "/api/sweeps/web-test-1/curves?metric=val_loss&trial=nope"])
def test_unknown_ids_are_json_404s(dashboard: Dashboard, path: str) -> None:
    small_sweep(dashboard.db)
    body = get(dashboard, path, 404)
    assert "nope" in body["error"] and "Traceback" not in body["error"]


def test_bad_parameters_are_400s_and_unknown_pages_404_pages(dashboard: Dashboard) -> None:
    small_sweep(dashboard.db)
    assert "max_points" in get(dashboard, "/api/sweeps/web-test-1/curves?metric=val_loss&max_points=lots", 400)["error"]
    assert "metric" in get(dashboard, "/api/sweeps/web-test-1/curves", 400)["error"]
    for path in ("curves?metric=val_loss&limit=1000&max_points=10000", "resources?limit=200&max_points=10000"):
        assert "limit x max_points" in get(dashboard, f"/api/sweeps/web-test-1/{path}", 400)["error"]  # ~200 MB of JSON
    for path in ("/sweeps/nope", "/sweeps/web-test-1/trials/nope"):
        page = get(dashboard, path, 404)
        assert "<h1>404" in page and "nope" in page and "Traceback" not in page


def test_every_name_and_error_a_trial_produced_is_escaped(dashboard: Dashboard) -> None:
    ids = small_sweep(dashboard.db)
    for path in (f"/sweeps/web-test-1/trials/{ids[HOSTILE]}", f"/sweeps/web-test-1/trials/{ids['exp_failed']}", "/sweeps/web-test-1"):
        page = get(dashboard, path)
        assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in get(dashboard, f"/sweeps/web-test-1/trials/{ids[HOSTILE]}")
    assert "CUDA out of memory &lt;script&gt;" in get(dashboard, f"/sweeps/web-test-1/trials/{ids['exp_failed']}")


def test_an_empty_database_shows_no_sweeps(dashboard: Dashboard) -> None:
    assert get(dashboard, "/api/sweeps") == []
    assert "No sweeps yet" in get(dashboard, "/")
