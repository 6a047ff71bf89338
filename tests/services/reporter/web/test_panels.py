"""The sweep page's further panels over HTTP against a real PostgreSQL:
mean and spread over seeds, the agents' timeline from the event journal,
cost against on demand, best so far against GPU-hours, resource use."""

from __future__ import annotations

import pytest
from dashseed import Dashboard, add_points, fleet_sweep, small_sweep
from test_api import get

pytestmark = pytest.mark.integration


def test_seeds_group_configs_and_average_their_curves(dashboard: Dashboard) -> None:
    fleet_sweep(dashboard.db)
    body = get(dashboard, "/api/sweeps/fleet-1/seeds?configs=2&max_points=20")
    assert body["repeats"] == 3 and "reason" not in body
    best = body["configs"][0]
    assert best["params"] == {"lr": 0.01, "opt": "adam"} and best["label"] == "lr=0.01 opt=adam"
    assert best["mean"] == pytest.approx(1.1) and best["std"] == pytest.approx(0.1) and best["n"] == 3
    means = [c["mean"] for c in body["configs"]]
    assert means == sorted(means) and len(means) == 6
    still_running = next(c for c in body["configs"] if c["params"] == {"lr": 0.1, "opt": "sgd"})
    assert (still_running["n"], still_running["runs"]) == (2, 3)  # the running seed has no value yet
    assert [c["label"] for c in body["curves"]] == ["lr=0.01 opt=adam", "lr=0.001 opt=adam"]
    curve = body["curves"][0]["points"]
    assert len(curve) <= 20 and curve[0][0] == 0 and curve[-1][0] == 49
    step, mean, low, high, n = curve[0]
    assert mean == pytest.approx(2.1) and low == pytest.approx(2.0) and high == pytest.approx(2.2) and n == 3


def test_a_sweep_without_repeats_says_why_it_has_no_seed_panel(dashboard: Dashboard) -> None:
    small_sweep(dashboard.db)
    body = get(dashboard, "/api/sweeps/web-test-1/seeds")
    assert body["configs"] == [] and body["curves"] == [] and "repeats: 1" in body["reason"]


def test_the_timeline_puts_each_run_on_its_agents_slot_with_its_outcome(dashboard: Dashboard) -> None:
    ids = fleet_sweep(dashboard.db)
    body = get(dashboard, "/api/sweeps/fleet-1/timeline")
    assert body["lanes"] == [{"agent": "node-a", "slot": 0}, {"agent": "node-a", "slot": 1}, {"agent": "node-b", "slot": 0}]
    assert body["total"] == len(body["runs"]) == 19  # 18 trials, one of them twice
    first = [r for r in body["runs"] if r["trial_id"] == ids["fleet_00"]]
    assert [(r["attempt"], r["agent"], r["outcome"]) for r in first] == [(1, "node-a", "preempted"), (2, "node-b", "completed")]
    running = next(r for r in body["runs"] if r["trial_id"] == ids["fleet_17"])
    assert running["outcome"] == "running" and running["end"] is None
    lanes_b = {r["lane"] for r in body["runs"] if r["agent"] == "node-b"}
    assert lanes_b == {2}  # node-b's runs never overlap: one slot
    assert get(dashboard, "/api/sweeps/fleet-1/timeline?limit=5")["runs"][-1] == body["runs"][-1]


def test_cost_against_on_demand_and_best_so_far_against_gpu_hours(dashboard: Dashboard) -> None:
    fleet_sweep(dashboard.db)
    cost = get(dashboard, "/api/sweeps/fleet-1/cost")
    # 16 runs of 600 s and trial 0's two: 10,800 s on 2 GPUs = 6 GPU-hours, at 1.0 spot and 3.0 on demand
    assert cost["gpus"] == 2 and cost["gpu_hours"] == pytest.approx(6.0)
    assert (cost["cost"], cost["on_demand"], cost["saving"]) == pytest.approx((6.0, 18.0, 12.0))
    assert cost["saving_share"] == pytest.approx(2 / 3) and "reason" not in cost
    assert cost["curve"][-1]["gpu_hours"] == pytest.approx(6.0) and cost["curve"][-1]["on_demand"] == pytest.approx(18.0)
    hours = [p["gpu_hours"] for p in cost["curve"]]
    assert hours == sorted(hours)
    best = get(dashboard, "/api/sweeps/fleet-1/best")
    last = best["points"][-1]
    # the best (lr=0.01 adam seed 0, 1.0) finished at 2,400 s, after 10 runs of 600 s had finished
    assert last["trial_name"] == "fleet_06" and last["value"] == pytest.approx(1.0)
    assert last["gpu_hours"] == pytest.approx(10 * 600 * 2 / 3600)
    assert [p["gpu_hours"] for p in best["points"]] == sorted(p["gpu_hours"] for p in best["points"])


def test_a_sweep_without_pricing_shows_gpu_hours_and_says_why(dashboard: Dashboard) -> None:
    small_sweep(dashboard.db)
    cost = get(dashboard, "/api/sweeps/web-test-1/cost")
    assert cost["pricing"] is None and cost["cost"] is None and "pricing" in cost["reason"]


def test_resource_use_per_trial_from_sys_points(dashboard: Dashboard) -> None:
    ids = fleet_sweep(dashboard.db)
    default = get(dashboard, "/api/sweeps/fleet-1/resources")
    assert len(default["trials"]) == 12 and default["trials"][0]["trial_id"] == ids["fleet_17"]  # running trials first
    body = get(dashboard, "/api/sweeps/fleet-1/resources?limit=18")
    assert body["metrics"] == ["sys/cpu_percent", "sys/rss_mb"]
    by_id = {t["trial_id"]: t for t in body["trials"]}
    assert by_id[ids["fleet_01"]]["series"]["sys/cpu_percent"][:2] == [[0, 91.0], [5, 91.0]]
    assert "val_loss" not in by_id[ids["fleet_01"]]["series"]  # only the agent's samples
    # a sample a new attempt sent for a step the first had sent wins, as in the curves
    add_points(dashboard.db, "fleet-1", [(ids["fleet_01"], 2, 5, "sys/cpu_percent", 12.0)])
    one = get(dashboard, f"/api/sweeps/fleet-1/resources?trial={ids['fleet_01']}&max_points=3")
    [trial] = one["trials"]
    assert len(trial["series"]["sys/rss_mb"]) == 3 and trial["series"]["sys/rss_mb"][0] == [0, 1000.0]
    assert get(dashboard, f"/api/sweeps/fleet-1/resources?trial={ids['fleet_01']}")["trials"][0]["series"][
        "sys/cpu_percent"][1] == [5, 12.0]


@pytest.mark.parametrize("path", ["/api/sweeps/nope/seeds", "/api/sweeps/nope/timeline", "/api/sweeps/nope/cost",
                                  "/api/sweeps/nope/resources", "/api/sweeps/fleet-1/resources?trial=nope"])
def test_unknown_ids_are_json_404s(dashboard: Dashboard, path: str) -> None:
    fleet_sweep(dashboard.db)
    assert "nope" in get(dashboard, path, 404)["error"]
