"""``spotsweep run``'s progress line: the running trials' steps, the best so far, the time left."""

from __future__ import annotations

import io
import json

import psycopg
from rich.console import Console

from spotsweep.services.local.progress import Lines, best_so_far, detail, eta_seconds, running_steps
from spotsweep.shared.db import Database

COUNTS = {"running": 2, "failed": 0}


def test_before_any_trial_ends_the_line_says_what_the_running_ones_do() -> None:
    assert detail(COUNTS, [None, None], None, None) == "running 2: starting, starting"
    assert detail(COUNTS, [30, None], None, None) == "running 2: step 30, starting"
    many = detail({"running": 6, "failed": 1}, [1, 2, 3, 4, 5, 6], None, None)
    assert many == "running 6: step 1, step 2, step 3, step 4, +2 · failed 1"


def test_once_trials_end_it_shows_the_best_and_the_time_left() -> None:
    assert detail(COUNTS, [30], ("val_loss", 0.412345), 42.4) == "running 2: step 30 · best val_loss 0.4123 · ETA ~0:42"
    assert detail(COUNTS, [], ("acc", 0.9), 3725) == "running 2 · best acc 0.9 · ETA ~1:02:05"
    assert detail(COUNTS, [], ("a\x1b[2Jb", 1.0), None) == "running 2 · best a\\x1b[2Jb 1"  # a name never drives the terminal


def test_the_time_left_is_the_pace_of_the_trials_this_run_finished() -> None:
    assert eta_seconds(elapsed=20, done_here=2, left=4) == 40
    assert eta_seconds(elapsed=20, done_here=0, left=6) is None  # no pace yet
    assert eta_seconds(elapsed=20, done_here=6, left=0) is None


def test_the_steps_and_the_best_come_from_the_database(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    spec = {"name": "p", "command": ["t"], "metric": {"name": "acc", "mode": "max"}, "space": {"x": [1, 2, 3, 4]}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('p-1', 'p', %s, 'running', 4)",
                     (json.dumps(spec),))
        assert best_so_far(db, "p-1") is None and running_steps(db, "p-1") == []
        for idx, state, attempt, metrics in ((0, "completed", 1, {"acc": 0.7}), (1, "completed", 1, {"acc": "NaN"}),
                                             (2, "running", 2, {}), (3, "running", 1, {}), (4, "pruned", 1, {"acc": 0.99})):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, attempt, metrics)"
                         " VALUES (%s, 'p-1', %s, %s, '{}', %s, %s, %s)",
                         (f"p.{idx}", idx, f"p_{idx}", state, attempt, json.dumps(metrics)))
        points = [("p.2", 1, 90, "acc"), ("p.2", 2, 40, "acc"), ("p.2", 2, 45, "sys/cpu_percent"),  # attempt 2 at 40
                  ("p.3", 1, 5, "sys/cpu_percent")]  # only a resource sample yet: starting
        for trial_id, attempt, step, name in points:
            conn.execute("INSERT INTO points (sweep_id, trial_id, attempt, step, name, value) VALUES ('p-1', %s, %s, %s, %s, 1)",
                         (trial_id, attempt, step, name))
    assert running_steps(db, "p-1") == [40, None]
    assert best_so_far(db, "p-1") == ("acc", 0.7)  # completed trials only; a NaN is never the best


def test_without_a_terminal_the_progress_is_whole_lines_when_the_count_changes_or_every_ten_seconds() -> None:
    """A log file or CI got a bar cut at 80 columns once; it gets full lines, never wrapped (issue 40)."""
    out = io.StringIO()
    lines = Lines(Console(file=out, width=80, force_terminal=False))
    long = "running 6: " + ", ".join(f"step {i}" for i in range(1, 30))
    for done, elapsed in [(0, 0.0), (0, 4.0), (0, 10.5), (1, 11.0), (1, 12.0)]:
        lines.show(done, 9, long, elapsed)
    said = out.getvalue().splitlines()
    assert said == [f"trials 0/9 · {long} · 0:00", f"trials 0/9 · {long} · 0:10", f"trials 1/9 · {long} · 0:11"]
