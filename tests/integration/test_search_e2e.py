"""The search end to end over real RabbitMQ, PostgreSQL and S3 (moto), every
service a separate process: ASHA promotes trials by resuming them from their
checkpoints with a larger budget and ends with exact results; sweeps of equal
priority take turns on the agents, and a higher priority goes first."""

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
