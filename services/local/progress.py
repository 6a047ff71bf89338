"""``spotsweep run``'s progress bar: trials done of all, and what a person waits on meanwhile.

Besides the bar: the step each running trial last reported (``starting`` until its
first point, so the first minute of a sweep is not a silent ``0/6``), the best
objective of the completed trials, and an estimate of the time left from the pace
of the trials this run finished.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.safe import shown
from spotsweep.services.reporter.values import metric_float
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError

SHOWN_RUNNING = 4  # running trials whose step the line names; more are counted
DETAIL_EVERY_S = 1.0  # how often the running steps and the best value are read
LINE_EVERY_S = 10.0  # without a terminal: a line at least this often while the count stays


def eta_seconds(elapsed: float, done_here: int, left: int) -> float | None:
    """Seconds left at the pace of the trials this run finished (None before the first one)."""
    return elapsed / done_here * left if done_here > 0 and left > 0 else None


def _clock(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{s:02d}" if minutes >= 60 else f"{minutes}:{s:02d}"


def detail(counts: dict[str, Any], steps: list[int | None], best: tuple[str, float] | None, eta: float | None) -> str:
    """``running 2: step 30, starting · failed 1 · best val_loss 0.4123 · ETA ~0:42``."""
    parts = [f"running {counts['running']}"]
    if steps:
        each = ", ".join("starting" if s is None else f"step {s}" for s in steps[:SHOWN_RUNNING])
        parts[0] += f": {each}" + (f", +{len(steps) - SHOWN_RUNNING}" if len(steps) > SHOWN_RUNNING else "")
    if counts["failed"]:
        parts.append(f"failed {counts['failed']}")
    if best is not None:
        parts.append(f"best {shown(best[0], 40)} {best[1]:.4g}")  # the spec's name: any text
    if eta is not None:
        parts.append(f"ETA ~{_clock(eta)}")
    return " · ".join(parts)


def running_steps(db: Database, sweep_id: str) -> list[int | None]:
    """The step each running trial's current attempt last reported (resource samples aside), None before its first."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT (SELECT p.step FROM points p WHERE p.trial_id = t.trial_id AND p.attempt = t.attempt"
            "        AND p.name NOT LIKE 'sys/%%' ORDER BY p.step DESC LIMIT 1) AS step"
            " FROM trials t WHERE t.sweep_id = %s AND t.state = 'running' ORDER BY t.idx", (sweep_id,)).fetchall()
    return [None if r["step"] is None else int(r["step"]) for r in rows]


def best_so_far(db: Database, sweep_id: str) -> tuple[str, float] | None:
    """The objective's name and its best value among the completed trials (None before the first)."""
    with db.transaction() as conn:
        spec = conn.execute("SELECT spec->'metric'->>'name' AS name, spec->'metric'->>'mode' AS mode FROM sweeps"
                            " WHERE sweep_id = %s", (sweep_id,)).fetchone()
        if spec is None or spec["name"] is None:
            return None
        rows = conn.execute("SELECT metrics->%s AS value FROM trials WHERE sweep_id = %s AND state = 'completed'",
                            (spec["name"], sweep_id)).fetchall()
    values = [v for v in (metric_float(r["value"]) for r in rows) if v is not None and v == v]  # NaN never best
    if not values:
        return None
    return spec["name"], (max(values) if spec["mode"] == "max" else min(values))


class Lines:
    """The progress without a terminal (a log file, a pipe, CI): a full line when the count changes, and at
    least every ``every`` seconds, instead of a live bar that a file would only get once, cut at 80 columns."""

    def __init__(self, console: Console, every: float = LINE_EVERY_S) -> None:
        self.console, self.every, self.done, self.said_at = console, every, -1, float("-inf")

    def show(self, done: int, total: int | None, text: str, elapsed: float) -> None:
        if done != self.done or elapsed - self.said_at >= self.every:
            line = f"trials {done}/{total if total is not None else '?'}" + (f" · {text}" if text else "")
            self.console.print(f"{line} · {_clock(elapsed)}", markup=False, highlight=False, soft_wrap=True)
            self.done, self.said_at = done, elapsed


def follow(db: Database, sweep_id: str, console: Console, stop: threading.Event, tick: Callable[[], None],
           poll: float = 0.2, accept_within: float = 30.0) -> str | None:
    """Show the progress (a bar on a terminal, else :class:`Lines`) until the sweep leaves ``running``;
    return its state (None once ``stop`` is set).
    ``tick`` runs before each look at the sweep (it takes the extensions `spotsweep extend` left).

    The planner records every spec it receives, even a refused one; a sweep
    that never shows up means the planner failed on it (its log says why).
    """
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[detail]}", markup=False), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("trials", total=None, detail="")
            return _follow(db, sweep_id, stop, tick, poll, accept_within,
                           lambda done, total, text, _: progress.update(task, total=total, completed=done, detail=text))
    return _follow(db, sweep_id, stop, tick, poll, accept_within, Lines(console).show)


def _follow(db: Database, sweep_id: str, stop: threading.Event, tick: Callable[[], None], poll: float,
            accept_within: float, show: Callable[[int, int | None, str, float], None]) -> str | None:
    started = time.monotonic()
    deadline, done_before, text, read_at, shown_done = started + accept_within, None, "", 0.0, -1
    while not stop.is_set():
        tick()
        rows = reporter.sweep_counts(db, sweep_id)
        if rows:
            r = rows[0]
            done = r["completed"] + r["failed"] + r["cancelled"] + r["pruned"]
            done_before = done if done_before is None else done_before  # a resumed sweep's earlier trials
            elapsed = time.monotonic() - started
            if time.monotonic() - read_at >= DETAIL_EVERY_S or done != shown_done:
                read_at = time.monotonic()
                eta = eta_seconds(elapsed, done - done_before, r["total_trials"] - done)
                text = detail(r, running_steps(db, sweep_id), best_so_far(db, sweep_id), eta)
            show(done, r["total_trials"] or None, text, elapsed)
            shown_done = done
            if r["state"] != "running":
                return str(r["state"])
        elif time.monotonic() > deadline:
            raise PermanentError(f"the planner did not record sweep {sweep_id} within {accept_within:.0f}s; "
                                 "run with --log-level INFO to see why")
        stop.wait(poll)
    return None
