"""The collector against a real PostgreSQL: batches land once, redelivery changes nothing."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from spotsweep.services.collector.handlers import write_events
from spotsweep.services.collector.main import measured_batch
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.db import Database
from spotsweep.shared.messages import CheckpointSaved, MetricPoint, TrialMetrics, encode


def _metrics(attempt: int, steps: range, trial: str = "s.0") -> TrialMetrics:
    return TrialMetrics(
        sweep_id="s", trial_id=trial, attempt=attempt,
        points=[MetricPoint(step=i, name=n, value=float(i) / 10) for i in steps for n in ("loss", "val_loss")],
    )


def test_points_are_written_once_even_when_redelivered(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    batch = [_metrics(1, range(0, 50)), _metrics(1, range(50, 100))]
    assert write_events(batch, db) == 200
    assert write_events(batch, db) == 0  # the same batch again: at-least-once delivery
    assert write_events([_metrics(1, range(90, 110))], db) == 20  # overlap: only the new steps
    with db.transaction() as conn:
        n = conn.execute("SELECT count(*) AS n FROM metric_points WHERE trial_id = 's.0'").fetchone()["n"]
        dup = conn.execute(
            "SELECT count(*) AS n FROM (SELECT 1 FROM metric_points GROUP BY trial_id, attempt, step, name HAVING count(*) > 1) d"
        ).fetchone()["n"]
    assert (n, dup) == (220, 0)


def test_attempts_keep_their_own_points_and_non_finite_values_survive(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    nan = TrialMetrics(sweep_id="s", trial_id="s.1", attempt=2, points=[MetricPoint(step=5, name="loss", value=math.nan)])
    write_events([_metrics(1, range(0, 3), "s.1"), _metrics(2, range(0, 3), "s.1"), nan], db)
    with db.transaction() as conn:
        rows = conn.execute("SELECT attempt, count(*) AS n FROM metric_points WHERE trial_id = 's.1' GROUP BY attempt ORDER BY attempt").fetchall()
        value = conn.execute("SELECT value FROM metric_points WHERE trial_id = 's.1' AND step = 5").fetchone()["value"]
    assert [(r["attempt"], r["n"]) for r in rows] == [(1, 6), (2, 7)]
    assert math.isnan(value)


def test_checkpoint_events_are_journaled_once_by_message_id(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    ev = CheckpointSaved(sweep_id="s", trial_id="s.0", attempt=1, step=20, uri="s3://b/s/s.0/20")
    write_events([ev], db)
    write_events([ev], db)  # redelivered
    with db.transaction() as conn:
        rows = conn.execute("SELECT kind, body FROM trial_events").fetchall()
    assert len(rows) == 1 and rows[0]["kind"] == "trial.checkpoint" and rows[0]["body"]["step"] == 20


def test_a_key_repeated_within_one_batch_keeps_its_first_value(database_url: str) -> None:
    """The contract: within one attempt a (step, name) pair is stored once, with the first value."""
    db = Database(database_url)
    db.migrate()
    twice = TrialMetrics(sweep_id="s", trial_id="s.2", attempt=1, points=[
        MetricPoint(step=1, name="loss", value=1.0), MetricPoint(step=2, name="loss", value=2.0),
        MetricPoint(step=1, name="loss", value=9.0)])
    later = TrialMetrics(sweep_id="s", trial_id="s.2", attempt=1, points=[MetricPoint(step=3, name="loss", value=3.0)])
    assert write_events([twice, later], db) == 3
    with db.transaction() as conn:
        rows = conn.execute("SELECT step, value FROM metric_points WHERE trial_id = 's.2' ORDER BY step").fetchall()
    assert [(r["step"], r["value"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_a_bad_metric_name_is_dropped_and_its_neighbours_stored(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    hostile = TrialMetrics(sweep_id="s", trial_id="s.2", attempt=1, steps=[0, 0, 0, 0, 1, 2**70],
                           names=["loss", "x" * 10_000_000, "a\x00b", "", "loss", "loss"],
                           values=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert write_events([hostile, _metrics(1, range(0, 2), "s.3")], db) == 2 + 4
    with db.transaction() as conn:
        rows = conn.execute("SELECT trial_id, step, name FROM metric_points ORDER BY trial_id, step, name").fetchall()
    assert [(r["trial_id"], r["step"], r["name"]) for r in rows] == [
        ("s.2", 0, "loss"), ("s.2", 1, "loss"),
        ("s.3", 0, "loss"), ("s.3", 0, "val_loss"), ("s.3", 1, "loss"), ("s.3", 1, "val_loss")]


def test_a_message_the_database_refuses_is_dead_lettered_alone_and_the_batch_stored(
        database_url: str, delivery: type[Any]) -> None:
    db = Database(database_url)
    db.migrate()
    # A trial id no index row can hold: nothing the collector checks, so the database refuses it (class 54).
    poison = TrialMetrics(sweep_id="s", trial_id="t" * 3_000_000, attempt=1, points=[MetricPoint(step=0, name="loss", value=1)])
    good = [_metrics(1, range(i, i + 1), f"s.{i}") for i in range(7)]
    deliveries = [delivery(encode(m)) for m in [*good[:3], poison, *good[3:]]]
    batcher = BatchingHandler(partial(measured_batch, db=db), max_batch=8, max_wait=0.01, retry_pause=0.01)
    try:
        for d in deliveries:
            batcher(d)
    finally:
        batcher.close()
    assert [d.settled for d in deliveries] == ["ack"] * 3 + ["dead-letter"] + ["ack"] * 4
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) AS n FROM metric_points").fetchone()["n"] == 14


def test_a_nul_in_a_journaled_event_is_replaced_not_fatal(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    write_events([CheckpointSaved(sweep_id="s", trial_id="s.0", attempt=1, step=2, uri="s3://b/x\x00y")], db)
    with db.transaction() as conn:
        assert conn.execute("SELECT body->>'uri' AS uri FROM trial_events").fetchone()["uri"] == "s3://b/x\ufffdy"


def test_an_agents_newest_announcement_is_what_readers_see(database_url: str) -> None:
    from datetime import datetime, timedelta, timezone

    from spotsweep.shared.messages import AgentSeen

    db = Database(database_url)
    db.migrate()
    now = datetime.now(timezone.utc)
    old = AgentSeen(agent="n1", resource_class="gpu", slots=2, cpus=8, memory=2**30, time=now - timedelta(minutes=1))
    new = AgentSeen(agent="n1", resource_class="gpu", slots=4, cpus=16, memory=2**34, gpus=1, time=now)
    write_events([new], db)
    write_events([old], db)  # delivered late: changes nothing
    with db.transaction() as conn:
        rows = conn.execute("SELECT agent_id, resource_class, slots, cpus, memory, gpus FROM agent_capacity").fetchall()
        journaled = conn.execute("SELECT count(*) AS n FROM trial_events").fetchone()["n"]
    assert rows == [{"agent_id": "n1", "resource_class": "gpu", "slots": 4, "cpus": 16.0, "memory": 2**34, "gpus": 1}]
    assert journaled == 0  # about no trial: not in the journal
