"""The search end to end over real RabbitMQ, PostgreSQL and S3 (moto), every
service a separate process: ASHA promotes trials by resuming them from their
checkpoints with a larger budget and ends with exact results; a TPE sweep
whose planner is killed half way suggests what an uninterrupted one would;
sweeps of equal priority take turns on the agents, and a higher priority
goes first."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cluster import Cluster, wait_for  # tests/support

pytestmark = pytest.mark.integration
CHAOS_TRIAL = Path(__file__).parents[1] / "chaos" / "chaos_trial.py"
sys.path.insert(0, str(CHAOS_TRIAL.parent))
from chaos_trial import expected  # noqa: E402


def rows(database_url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, args).fetchall()


def test_asha_promotes_by_resuming_from_the_checkpoint_and_ends_exact(cluster: Cluster, database_url: str) -> None:
    spec = {
        "name": "asha",
        "command": ["python", str(CHAOS_TRIAL), "--k", "{k}", "--steps", "{steps}", "--pause", "0.01", "--ckpt-every", "5"],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"k": list(range(6))},
        "strategy": {"type": "asha", "budget": {"param": "steps", "min": 5, "max": 45}, "eta": 3},
        "max_concurrent": 2,
        "resources": {"gpus": 0, "class": "cpu"},
    }
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu")
    sweep_id = cluster.submit(spec)
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running",
                     timeout=120)
    assert state == "completed", cluster.logs()
    trials = rows(database_url, "SELECT trial_id, (params->>'k')::int, (params->>'steps')::int, state,"
                                " (metrics->>'loss')::float8, attempts FROM trial_results WHERE sweep_id = %s", sweep_id)
    by_state = {s: [t for t in trials if t[3] == s] for s in ("completed", "pruned")}
    assert len(by_state["completed"]) + len(by_state["pruned"]) == 6 and by_state["pruned"], trials
    for trial_id, k, steps, _state, loss, attempts in trials:
        assert loss == expected(k, steps)[-1]  # the value at the budget it reached, exactly
        starts = rows(database_url, "SELECT attempt, (body->>'resume_step')::int FROM trial_events WHERE trial_id = %s"
                                    " AND kind = 'trial.started' ORDER BY attempt", trial_id)
        budgets = [5, 15, 45][:attempts]
        # Each promotion resumed from the checkpoint the previous budget left, never from step 0.
        assert starts == [(1, None), *((a + 2, budgets[a]) for a in range(attempts - 1))], (trial_id, starts)
    assert any(t[2] == 45 for t in by_state["completed"])  # someone made it to the top budget
    points = rows(database_url, "SELECT count(*), count(DISTINCT (trial_id, step)) FROM metric_points"
                                " WHERE sweep_id = %s AND name = 'loss'", sweep_id)[0]
    assert points[0] == points[1] == sum(t[2] for t in trials)  # every step once, none redone


QUADRATIC = """
from spotsweep import trial
trial.report(1, loss=(trial.params["x"] - 0.3) ** 2)
"""


def test_a_killed_planner_restarts_a_tpe_sweep_from_the_database_and_suggests_the_same(cluster: Cluster,
                                                                                        database_url: str) -> None:
    from spotsweep.services.planner.search import Search, TrialRecord
    from spotsweep.shared.spec import parse_spec
    from spotsweep.shared.states import TrialState

    spec = {
        "name": "tpe-restart",
        "command": ["python", "-c", QUADRATIC.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
        "strategy": {"type": "tpe", "trials": 8, "seed": 3, "startup_trials": 2},
        "max_concurrent": 1,  # one at a time: trial i is suggested from trials 0..i-1, all completed
        "resources": {"gpus": 0, "class": "cpu"},
    }
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "1", "--class", "cpu")
    sweep_id = cluster.submit(spec)
    done = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'completed'"
    assert wait_for(database_url, done, (sweep_id,), lambda n: n >= 3) >= 3, cluster.logs()
    cluster.kill9("planner")  # past TPE's startup: the next suggestions come from the model
    assert rows(database_url, done, sweep_id)[0][0] < 8
    cluster.start("planner2", "planner")
    state = wait_for(database_url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s != "running",
                     timeout=120)
    assert state == "completed", cluster.logs()
    trials = rows(database_url, "SELECT idx, params, (metrics->>'loss')::float8 FROM trials WHERE sweep_id = %s ORDER BY idx",
                  sweep_id)
    assert [t[0] for t in trials] == list(range(8))
    search = Search(parse_spec(spec))
    history = [TrialRecord(i, params, TrialState.COMPLETED, (loss,)) for i, params, loss in trials]
    # What an uninterrupted planner would have suggested for each trial, from the trials before it.
    assert [search.propose(i, history[:i]).params for i in range(8)] == [t[1] for t in trials]
    assert len({t[1]["x"] for t in trials}) == 8


def sleeper(name: str, n: int, priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", "import time; time.sleep(0.4)"],
        "metric": {"name": "loss"},
        "space": {"i": list(range(n))},
        "max_concurrent": n,
        "priority": priority,
        "resources": {"gpus": 0, "class": "cpu"},
    }


def test_equal_priorities_take_turns_and_a_higher_priority_goes_first(cluster: Cluster, database_url: str) -> None:
    cluster.start("planner", "planner", env={"SPOTSWEEP_QUEUE_WINDOW": "1"})
    cluster.start("collector", "collector")
    a = cluster.submit(sleeper("a", 6))
    b = cluster.submit(sleeper("b", 6))
    cluster.start("agent", "agent", "--slots", "1", "--class", "cpu")
    started = "SELECT count(*) FROM trials WHERE state IN ('running', 'completed') AND sweep_id IN (%s, %s)"
    wait_for(database_url, started, (a, b), lambda n: n >= 4)
    urgent = cluster.submit(sleeper("urgent", 3, priority=9))
    done = "SELECT count(*) FROM sweeps WHERE state = 'completed' AND sweep_id IN (%s, %s, %s)"
    assert wait_for(database_url, done, (a, b, urgent), lambda n: n == 3, timeout=120) == 3, cluster.logs()
    order = [r[0] for r in rows(database_url, "SELECT sweep_id FROM trials WHERE sweep_id IN (%s, %s, %s)"
                                              " ORDER BY started_at", a, b, urgent)]
    first_urgent = order.index(urgent)
    before = order[:first_urgent]
    assert abs(before.count(a) - before.count(b)) <= 1, order  # turns, not a's backlog first
    # Once it arrived, the urgent sweep's trials ran back to back, ahead of what a and b had left.
    mine = [i for i, s in enumerate(order) if s == urgent]
    assert mine == list(range(mine[0], mine[0] + 3)) and order[mine[-1] + 1:].count(a) >= 1 and order[mine[-1] + 1:].count(b) >= 1, order
