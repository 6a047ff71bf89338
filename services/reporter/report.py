"""Leaderboards and CSV, read only from the public views ``trial_results``.

The reporter never touches the tables behind the views: what it shows is
what any user's SQL sees.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spotsweep.services.reporter.summary import ConfigSummary, SweepCost, by_config, cost_of
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError


@dataclass(frozen=True)
class Report:
    sweep_id: str
    sweep_name: str
    sweep_state: str
    metric: str
    mode: str
    params: list[str]
    metrics: list[str]
    ranked: list[dict[str, Any]]  # trials with the metric, best first
    unranked: list[dict[str, Any]]  # trials without it, with why
    configs: list[ConfigSummary] = field(default_factory=list)  # with repeats: mean and spread over seeds
    cost: SweepCost | None = None  # with pricing in the spec


def _why(row: dict[str, Any], metric: str) -> str:
    if row["state"] in ("failed", "cancelled", "pruned"):
        first = (row["error"] or "").strip().splitlines()
        return f"{row['state']}: {first[-1] if first else 'no error text'}"
    if row["state"] != "completed":
        return row["state"]
    return f"completed without reporting {metric!r}"


def build(db: Database, sweep_id: str) -> Report:
    with db.transaction() as conn:
        sweep = conn.execute("SELECT sweep_id, name, state, spec, error FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()
        if sweep is None:
            raise PermanentError(f"no sweep with id {sweep_id!r} (see `spotsweep ls`)")
        every = conn.execute("SELECT * FROM trial_results WHERE sweep_id = %s ORDER BY trial_name", (sweep_id,)).fetchall()
    rows = [r for r in every if not r.get("smoke")]  # the smoke stage is not part of the comparison
    spec = sweep["spec"] or {}
    metric = (spec.get("metric") or {}).get("name", "")
    mode = (spec.get("metric") or {}).get("mode", "min")
    seen = {k for r in rows for k in r["params"]}
    space = list(spec.get("space", {}))  # the spec's order (stored as json, not jsonb, to keep it)
    params = [k for k in space if k in seen] + sorted(seen - set(space))
    metrics = sorted({k for r in rows for k in (r["metrics"] or {})}, key=lambda k: (k != metric, k))
    ranked = [r for r in rows if r["state"] == "completed" and _finite((r["metrics"] or {}).get(metric))]
    ranked.sort(key=lambda r: r["metrics"][metric], reverse=(mode == "max"))
    ranked_ids = {r["trial_id"] for r in ranked}
    unranked = [r for r in rows if r["trial_id"] not in ranked_ids]
    configs = by_config(rows, metric, mode) if int(spec.get("repeats") or 1) > 1 else []
    pricing = spec.get("pricing")
    cost = cost_of(every, int((spec.get("resources") or {}).get("gpus", 1)), pricing) if pricing else None
    return Report(sweep["sweep_id"], sweep["name"], sweep["state"], metric, mode, params, metrics, ranked, unranked,
                  configs, cost)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def console() -> Console:
    """A console for tables: the terminal's width, or wide when piped to a file
    (rich's default of 80 columns would cut trial names and metrics)."""
    return Console() if sys.stdout.isatty() else Console(width=240)


def metric_columns(report: Report) -> list[str]:
    """Metric column names; a metric named like a param (``lr`` reported as the
    schedule's current value) becomes ``metric:lr`` so columns stay unique."""
    return [f"metric:{m}" if m in report.params else m for m in report.metrics]


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def print_leaderboard(report: Report, out: Console | None = None, top: int | None = None) -> None:
    out = out or console()
    arrow = "↓" if report.mode == "min" else "↑"
    table = Table(title=f"{report.sweep_name} ({report.sweep_id}) — {report.sweep_state}, ranked by {report.metric} {arrow}")
    table.add_column("#", justify="right")
    table.add_column("trial", no_wrap=True)
    for p in report.params:
        table.add_column(p, justify="right")
    for m, header in zip(report.metrics, metric_columns(report)):
        table.add_column(header, justify="right", style="bold" if m == report.metric else None)
    table.add_column("attempts", justify="right")
    for i, row in enumerate(report.ranked[:top] if top else report.ranked, 1):
        table.add_row(
            str(i), row["trial_name"], *(_fmt(row["params"].get(p)) for p in report.params),
            *(_fmt((row["metrics"] or {}).get(m)) for m in report.metrics), str(row["attempts"]),
        )
    out.print(table)
    if report.configs:
        print_configs(report, out, top)
    if report.cost is not None:
        out.print(cost_line(report.cost), highlight=False)
    if report.unranked:
        out.print(f"[bold]{len(report.unranked)} trial(s) without results:[/bold]")
        for row in report.unranked:
            out.print(f"  {row['trial_name']}: {_why(row, report.metric)}", markup=False, highlight=False)


def print_configs(report: Report, out: Console, top: int | None = None) -> None:
    """Configs ranked by their mean over seeds, with the spread."""
    arrow = "↓" if report.mode == "min" else "↑"
    table = Table(title=f"per config over seeds: mean {report.metric} {arrow}, std, seeds reported")
    table.add_column("#", justify="right")
    names = [p for p in report.params if p != "seed"]
    for p in names:
        table.add_column(p, justify="right")
    for header in ("mean", "std", "n"):
        table.add_column(header, justify="right", style="bold" if header == "mean" else None)
    for i, c in enumerate(report.configs[:top] if top else report.configs, 1):
        n = f"{c.n}" if c.n == c.runs else f"{c.n} of {c.runs}"
        table.add_row(str(i), *(_fmt(c.params.get(p)) for p in names), _fmt(c.mean), _fmt(c.std) if c.std is not None else "-", n)
    out.print(table)


def cost_line(cost: SweepCost) -> str:
    line = f"cost: {cost.gpu_hours:.2f} GPU-h of running trials"
    if cost.cost is not None:
        line += f", {cost.cost:.2f} at the spot price"
    if cost.on_demand is not None and cost.cost is not None:
        line += f", {cost.on_demand:.2f} on demand (saved {cost.on_demand - cost.cost:.2f})"
    return line


def write_csv(report: Report, path: Path) -> int:
    """One row per trial: trial_name, state, one column per param, one per final metric."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial_name", "state", *report.params, *metric_columns(report), "attempts", "preemptions", "error"])
        for row in [*report.ranked, *report.unranked]:
            writer.writerow([
                row["trial_name"], row["state"], *(row["params"].get(p, "") for p in report.params),
                *((row["metrics"] or {}).get(m, "") for m in report.metrics),
                row["attempts"], row["preemptions"], (row["error"] or "").strip().splitlines()[-1:][0] if row["error"] else "",
            ])
    return len(report.ranked) + len(report.unranked)


def glob_to_similar(pattern: str) -> str:
    """A shell glob (``deepseek_exp_*``, ``run_[0-3]?``) as a SQL ``SIMILAR TO``
    pattern, so filters run in the database instead of over every row."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        close = pattern.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("%")
        elif c == "?":
            out.append("_")
        elif close != -1:
            body = pattern[i + 1:close]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close
        elif c in "%_|+(){}[]\\":
            out.append("\\" + c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def sweep_counts(db: Database, sweep_id: str | None = None, name_glob: str | None = None) -> list[dict[str, Any]]:
    """One row per sweep: state and trial counts by state (``spotsweep status``/``ls``)."""
    where, args = [], []
    if sweep_id:
        where.append("s.sweep_id = %s")
        args.append(sweep_id)
    if name_glob:
        where.append("s.name SIMILAR TO %s")
        args.append(glob_to_similar(name_glob))
    sql = (
        "SELECT s.sweep_id, s.name, s.state, s.error, s.note, s.total_trials, s.created_at, s.finished_at,"
        " count(t.*) FILTER (WHERE t.state = 'completed') AS completed,"
        " count(t.*) FILTER (WHERE t.state = 'failed') AS failed,"
        " count(t.*) FILTER (WHERE t.state = 'cancelled') AS cancelled,"
        " count(t.*) FILTER (WHERE t.state = 'pruned') AS pruned,"
        " count(t.*) FILTER (WHERE t.state = 'running') AS running,"
        " count(t.*) FILTER (WHERE t.state IN ('pending', 'queued')) AS queued"
        " FROM sweeps s LEFT JOIN trials t ON t.sweep_id = s.sweep_id AND t.idx >= 0"  # not the smoke stage
        + (" WHERE " + " AND ".join(where) if where else "")
        + " GROUP BY s.sweep_id ORDER BY s.created_at DESC"
    )
    with db.transaction() as conn:
        return [dict(r) for r in conn.execute(sql, args).fetchall()]
