"""``spotsweep top``: a live terminal view of the running trials.

One row per running trial (of one sweep with ``--sweep``): its agent, the
latest resource samples the agent sent (``sys/gpu_util``, ``sys/gpu_mem_mb``,
``sys/cpu_percent``, ``sys/rss_mb``), its step, its objective's latest value, and an ETA
from its step rate in this attempt and its maximum step when its params name
one (:data:`MAX_STEP_PARAMS`), else blank. It reads only the public views
(``trial_results``, ``metric_points``, ``sweep_results``), as ``ls`` does.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import datetime
from typing import Any

from rich.live import Live
from rich.table import Table
from rich.text import Text

from spotsweep.commands import command
from spotsweep.commands import sweeps as commands
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.safe import cell, shown
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

REFRESH_S = 2.0
# Params read as the trial's last step, first found wins (for the ETA).
MAX_STEP_PARAMS = ("max_steps", "steps", "total_steps", "num_steps", "max_iters", "iters", "epochs")

# Per running trial of its current attempt: the latest value of each sys/ metric; its
# newest and first own points (their recorded_at give the step rate). LATERAL per trial
# over the points' primary key (trial_id, attempt, step, name): no scan of the sweep's points.
# The metric shown is the sweep's objective at its newest step (any other metric only before the first).
_SQL = """
WITH objectives AS (
    SELECT sweep_id, metric FROM sweep_results
    WHERE state = 'running' AND (%(sweep)s::text IS NULL OR sweep_id = %(sweep)s OR name = %(sweep)s))
SELECT t.sweep_id, t.sweep_name, t.trial_id, t.trial_name, t.agent, t.attempts, t.params, t.started_at, t.flags,
       s.names AS sys_names, s.vals AS sys_values, l.step, COALESCE(ob.name, l.name) AS metric,
       CASE WHEN ob.name IS NULL THEN l.value ELSE ob.value END AS value, l.recorded_at AS step_at,
       f.step AS first_step, f.recorded_at AS first_at
FROM trial_results t
LEFT JOIN objectives o ON o.sweep_id = t.sweep_id
LEFT JOIN LATERAL (
    SELECT name, value FROM metric_points p
    WHERE p.trial_id = t.trial_id AND p.attempt = t.attempts AND p.name = o.metric
    ORDER BY step DESC LIMIT 1) ob ON true
LEFT JOIN LATERAL (
    SELECT array_agg(name) AS names, array_agg(value) AS vals FROM (
        SELECT DISTINCT ON (name) name, value FROM metric_points p
        WHERE p.trial_id = t.trial_id AND p.attempt = t.attempts AND p.name LIKE 'sys/%%'
        ORDER BY name, step DESC) latest) s ON true
LEFT JOIN LATERAL (
    SELECT step, name, value, recorded_at FROM metric_points p
    WHERE p.trial_id = t.trial_id AND p.attempt = t.attempts AND p.name NOT LIKE 'sys/%%'
    ORDER BY step DESC, name LIMIT 1) l ON true
LEFT JOIN LATERAL (
    SELECT step, recorded_at FROM metric_points p
    WHERE p.trial_id = t.trial_id AND p.attempt = t.attempts AND p.name NOT LIKE 'sys/%%'
    ORDER BY step LIMIT 1) f ON true
WHERE t.state = 'running' AND (%(sweep)s::text IS NULL OR t.sweep_id = %(sweep)s OR t.sweep_name = %(sweep)s)
ORDER BY t.sweep_id, t.trial_name
"""


def max_steps(params: dict[str, Any]) -> int | None:
    """The trial's last step as its params say (:data:`MAX_STEP_PARAMS`), or None."""
    for name in MAX_STEP_PARAMS:
        value = params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def eta_seconds(first_step: int | None, first_at: float | None, step: int | None, step_at: float | None,
                last: int | None) -> float | None:
    """Seconds until step ``last`` at the rate from (``first_step``, ``first_at``) to (``step``, ``step_at``);
    None without a last step or a rate (fewer than two steps apart, no time between them)."""
    if first_step is None or first_at is None or step is None or step_at is None or last is None:
        return None
    if step <= first_step or step_at <= first_at:
        return None
    return max(0.0, (last - step) / ((step - first_step) / (step_at - first_at)))


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def rows(db: Database | None, sweep: str | None) -> list[dict[str, Any]]:
    """The running trials, one dict each (what ``--json`` prints)."""
    if db is None:
        return []
    with db.transaction() as conn:
        found = conn.execute(_SQL, {"sweep": sweep}).fetchall()
    out = []
    for r in found:
        sys, last = dict(zip(r["sys_names"] or [], r["sys_values"] or [])), max_steps(r["params"] or {})
        out.append({
            "sweep_id": r["sweep_id"], "trial_id": r["trial_id"], "trial_name": r["trial_name"], "agent": r["agent"],
            "attempt": r["attempts"], "gpu_util": sys.get("sys/gpu_util"), "gpu_mem_mb": sys.get("sys/gpu_mem_mb"),
            "cpu_percent": sys.get("sys/cpu_percent"), "rss_mb": sys.get("sys/rss_mb"), "step": r["step"],
            "metric": r["metric"], "value": r["value"], "max_steps": last,
            "eta_seconds": eta_seconds(r["first_step"], _epoch(r["first_at"]), r["step"], _epoch(r["step_at"]), last),
            "flags": list(r["flags"] or []),
        })
    return out


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "" if value is None or not math.isfinite(value) else fmt.format(value)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, s = divmod(int(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}"


def table(found: list[dict[str, Any]], sweep: str | None = None) -> Table:
    """The rows as a rich table; every name a trial or agent chose is shown escaped."""
    t = Table(title=f"running trials{f' of {shown(sweep)}' if sweep else ''} ({len(found)})")
    for col in ("trial", "sweep", "agent", "gpu %", "gpu MiB", "cpu %", "rss MiB", "step", "objective", "eta", "flags"):
        t.add_column(col, justify="right" if col in ("gpu %", "gpu MiB", "cpu %", "rss MiB", "step", "eta") else "left")
    for r in found:
        value = "" if r["value"] is None else f"{r['value']:.4g}"  # a NaN shows as nan
        metric = "" if r["metric"] is None else f"{shown(r['metric'])}={value}"
        t.add_row(cell(r["trial_name"]), cell(r["sweep_id"]), cell(r["agent"] or ""), _num(r["gpu_util"]),
                  _num(r["gpu_mem_mb"]), _num(r["cpu_percent"]), _num(r["rss_mb"]),
                  "" if r["step"] is None else str(r["step"]), Text(metric), _eta(r["eta_seconds"]),
                  Text(" ".join(f"[{shown(f)}]" for f in r["flags"])))
    return t


def _known(db: Database | None, sweep: str) -> bool:
    if db is None:
        return False
    if reporter.sweep_counts(db, sweep):
        return True
    with db.transaction() as conn:
        return conn.execute("SELECT 1 FROM trial_results WHERE sweep_name = %s LIMIT 1", (sweep,)).fetchone() is not None


def _top_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", help="only this sweep (id or name)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="print the rows as JSON and exit")


@command("top", _top_args)
def top(args: argparse.Namespace, settings: Settings) -> int:
    """Redraw the table every :data:`REFRESH_S` seconds until Ctrl-C; exit 2 for a sweep the database does not know."""
    sweep = args.sweep
    db = commands.database_if_any(settings)
    if sweep is not None and not _known(db, sweep):
        raise PermanentError(f"--sweep {shown(sweep)!s}: no such sweep (by id or name) in the results database")
    if args.json:
        commands.print_json(rows(db, sweep))
        return ExitCode.OK
    console = reporter.console()
    if args.once:
        console.print(table(rows(db, sweep), sweep))
        return ExitCode.OK
    try:
        with Live(table(rows(db, sweep), sweep), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(REFRESH_S)
                live.update(table(rows(db, sweep), sweep), refresh=True)
    except KeyboardInterrupt:
        return ExitCode.OK

