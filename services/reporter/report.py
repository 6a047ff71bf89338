"""Leaderboards and CSV, read only from the public views ``sweep_results`` and ``trial_results``.

The reporter never touches the tables behind the views: what it shows is
what any user's SQL sees. What trials wrote (names, params, metric names,
errors) is data, never markup or terminal control: every cell goes through
:mod:`~spotsweep.services.reporter.safe`, every value through
:mod:`~spotsweep.services.reporter.values`, and a report is bounded however
many metrics, warnings or error text the trials brought.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from spotsweep.services.reporter import lineage
from spotsweep.services.reporter.budget_line import budget_line, caps_of, spent_of
from spotsweep.services.reporter.fit import TRIAL_MIN, fit, measured
from spotsweep.services.reporter.safe import cell, csv_cell, printable, shown
from spotsweep.services.reporter.summary import ConfigSummary, SweepCost, by_config, cost_of
from spotsweep.services.reporter.values import metric_float, rank_key
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.limits import ERROR_CHARS, cap_text


# Metric columns a leaderboard shows beside the objective: a trial may report up
# to a thousand metrics, and a table a hundred thousand columns wide is of use
# to no one (it took minutes and gigabytes to draw). ``--metrics`` chooses.
SHOWN_METRICS = 8
SHOWN_WARNINGS = 3  # per trial, in a report's list of trials with warnings
WARNING_TRIALS = 20  # trials listed with their warnings
WHY_CHARS = 300  # one line of why a trial has no result


@dataclass(frozen=True)
class Report:
    sweep_id: str
    sweep_name: str
    sweep_state: str
    metric: str
    mode: str
    params: list[str]
    metrics: list[str]  # the metric columns shown: the objective first
    ranked: list[dict[str, Any]]  # completed trials with the metric, best first (non-finite last)
    unranked: list[dict[str, Any]]  # trials without it, with why
    configs: list[ConfigSummary] = field(default_factory=list)  # with repeats: mean and spread over seeds
    cost: SweepCost | None = None  # with pricing in the spec
    every_metric: list[str] = field(default_factory=list)  # every metric any trial reported (the CSV's columns)
    budget: str | None = None  # what the sweep spent against its budget caps (:mod:`.budget_line`); None without caps
    lineage: list[str] = field(default_factory=list)  # PBT: each trial's segments (:mod:`.lineage`)

    @property
    def hidden_metrics(self) -> int:
        return len(self.every_metric) - len(self.metrics)


def _why(row: dict[str, Any], metric: str) -> str:
    if row["state"] in ("failed", "cancelled", "pruned"):
        first = (row["error"] or "").strip().splitlines()
        return printable(cap_text(f"{row['state']}: {first[-1] if first else 'no error text'}", WHY_CHARS))
    if row["state"] != "completed":
        return row["state"]
    return printable(f"completed without reporting {cap_text(metric, WHY_CHARS)!r}")


def build(db: Database, sweep_id: str, metrics: Sequence[str] = (), most: int = SHOWN_METRICS) -> Report:
    """The sweep's leaderboard: its objective and ``metrics`` (default: the first
    ``most`` others by name) as columns, every trial ranked or said why not."""
    with db.transaction() as conn:
        sweep = conn.execute("SELECT sweep_id, name, state, spec, error, trials, steps, gpu_hours, cost, created_at,"
                             " finished_at, now() AS now FROM sweep_results WHERE sweep_id = %s", (sweep_id,)).fetchone()
        if sweep is None:
            raise PermanentError(f"no sweep with id {printable(cap_text(sweep_id, 200))!r} (see `spotsweep ls`)")
        every = conn.execute("SELECT * FROM trial_results WHERE sweep_id = %s ORDER BY trial_name", (sweep_id,)).fetchall()
        segments = lineage.segments(conn, sweep_id)
    rows = [r for r in every if not r.get("smoke")]  # the smoke stage is not part of the comparison
    spec = sweep["spec"] or {}
    metric = (spec.get("metric") or {}).get("name", "")
    mode = (spec.get("metric") or {}).get("mode", "min")
    reported: set[str] = set().union(*((r["metrics"] or {}).keys() for r in rows))
    every_metric = sorted(reported, key=lambda k: (k != metric, k))
    ranked, unranked = _ranking(rows, metric, mode)
    configs = by_config(rows, metric, mode) if int(spec.get("repeats") or 1) > 1 else []
    pricing = spec.get("pricing")
    cost = cost_of(every, int((spec.get("resources") or {}).get("gpus", 1)), pricing) if pricing else None
    budget = budget_line(caps_of(spec.get("budget")), spent_of(sweep, sweep["now"]))
    return Report(sweep["sweep_id"], sweep["name"], sweep["state"], metric, mode, _params(rows, spec),
                  _shown(every_metric, metric, metrics, most), ranked, unranked, configs, cost, every_metric, budget,
                  lineage.lines([*ranked, *unranked], segments))


def _params(rows: list[dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    """The param columns: the spec's space in its order (stored as json, not jsonb, to keep it), then any
    other param a trial had, by name."""
    seen = {k for r in rows for k in r["params"]}
    space = list(spec.get("space", {}))
    return [k for k in space if k in seen] + sorted(seen - set(space))


def _ranking(rows: list[dict[str, Any]], metric: str, mode: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the trials that completed with a finite objective, best first; every other trial, in order)."""
    ranked = [r for r in rows if r["state"] == "completed" and metric_float((r["metrics"] or {}).get(metric)) is not None]
    ranked.sort(key=lambda r: rank_key(r["metrics"][metric], mode))
    ranked_ids = {r["trial_id"] for r in ranked}
    return ranked, [r for r in rows if r["trial_id"] not in ranked_ids]


def _shown(every: list[str], objective: str, chosen: Sequence[str], most: int) -> list[str]:
    """The objective (when reported), then the chosen metrics, or the first ``most`` others."""
    head = [objective] if objective in every else []
    if not chosen:
        return head + [m for m in every if m != objective][:most]
    if missing := [m for m in chosen if m not in every]:
        some = ", ".join(printable(m) for m in every[:10])
        raise PermanentError(f"--metrics: no trial of this sweep reported {printable(missing[0])!r} "
                             f"({len(every)} metric(s): {some}{', ...' if len(every) > 10 else ''})")
    return head + [m for m in dict.fromkeys(chosen) if m != objective]


def console() -> Console:
    """A console for tables: ``COLUMNS`` when set, else the terminal's width, or
    wide when piped to a file (rich's default of 80 columns would drop columns)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 40:
        return Console(width=int(columns))
    return Console() if sys.stdout.isatty() else Console(width=240)


def metric_columns(report: Report, metrics: Sequence[str] | None = None) -> list[str]:
    """Metric column names; a metric named like a param (``lr`` reported as the
    schedule's current value) becomes ``metric:lr`` so columns stay unique."""
    params = set(report.params)
    return [f"metric:{m}" if m in params else m for m in (report.metrics if metrics is None else metrics)]


def print_leaderboard(report: Report, out: Console | None = None, top: int | None = None) -> None:
    """The ranked trials (the ``top`` first) as a table fit to the console's width, then what it leaves
    out, the per-config table, cost, budget, lineage, the trials without results and the warnings."""
    out = out or console()
    table, dropped = _leaderboard(report, out.width, top)
    out.print(table)
    if dropped:
        out.print(Text(f"not shown at {out.width} columns: {', '.join(dropped)} (a wider terminal, --metrics, or --csv)"))
    if report.hidden_metrics:
        out.print(f"{report.hidden_metrics} more metric(s) not shown: choose with --metrics NAME,NAME "
                  "(--csv writes them all)", markup=False, highlight=False)
    if report.configs:
        print_configs(report, out, top)
    if report.cost is not None:
        out.print(cost_line(report.cost), highlight=False)
    if report.budget is not None:
        out.print(Text(report.budget))
    if report.lineage:
        out.print("[bold]Lineage[/bold] (segments of the budget; from: the checkpoint it continued from):")
        for text in report.lineage:
            out.print(Text(f"  {text}"))
    if report.unranked:
        out.print(f"[bold]{len(report.unranked)} trial(s) without results:[/bold]")
        for trial in report.unranked:
            out.print(Text(f"  {shown(trial['trial_name'])}: {_why(trial, report.metric)}"))
    print_warnings([*report.ranked, *report.unranked], out)


def _leaderboard(report: Report, width: int, top: int | None) -> tuple[Table, list[str]]:
    """(the ranked trials' table in ``width`` columns, the names of the columns it had no room for); the
    rank, trial, objective and attempts columns always stay."""
    arrow = "↓" if report.mode == "min" else "↑"
    table = Table(title=Text(printable(f"{report.sweep_name} ({report.sweep_id}) — {report.sweep_state}, "
                                       f"ranked by {cap_text(report.metric, 200)} {arrow}")))
    rows = [[str(i), shown(r["trial_name"]), *(shown(r["params"].get(p)) for p in report.params),
             *(shown((r["metrics"] or {}).get(m)) for m in report.metrics), str(r["attempts"])]
            for i, r in enumerate(report.ranked[:top] if top else report.ranked, 1)]
    names = ["#", "trial", *map(shown, report.params), *map(shown, metric_columns(report)), "attempts"]
    objective = 2 + len(report.params) + (report.metrics.index(report.metric) if report.metric in report.metrics else -99)
    columns = [measured(name, [row[i] for row in rows], required=i in (0, 1, objective, len(names) - 1),
                        cap=max(TRIAL_MIN, width // 3) if i == 1 else None) for i, name in enumerate(names)]
    kept, dropped = fit(columns, width)
    for i in kept:
        if i == 1:  # a long name wraps onto more lines; it is never cut
            table.add_column("trial", overflow="fold", min_width=min(columns[1].width, TRIAL_MIN))
        else:
            table.add_column(cell(names[i]), justify="right", no_wrap=True,
                             style="bold" if i == objective else None)
    for row in rows:
        table.add_row(*(Text(row[i]) for i in kept))
    return table, dropped


def print_warnings(rows: Sequence[dict[str, Any]], out: Console) -> None:
    """Trials whose runs skipped lines of their files, or hit a limit: a few warnings each, a few trials."""
    flagged = [r for r in rows if r.get("warnings") or r.get("flags")]
    if not flagged:
        return
    out.print(f"[bold]{len(flagged)} trial(s) with warnings:[/bold]")
    for row in flagged[:WARNING_TRIALS]:
        flags = ", ".join(shown(f) for f in row.get("flags") or [])
        out.print(Text(f"  {shown(row['trial_name'])}" + (f" [{flags}]" if flags else "")))
        said = row.get("warnings") or []
        for warning in said[:SHOWN_WARNINGS]:
            out.print(Text(f"    {printable(cap_text(warning, WHY_CHARS))}"))
        if len(said) > SHOWN_WARNINGS:
            out.print(Text(f"    and {len(said) - SHOWN_WARNINGS} more warning(s)"))
    if len(flagged) > WARNING_TRIALS:
        out.print(Text(f"  and {len(flagged) - WARNING_TRIALS} more trial(s) with warnings"))


def print_configs(report: Report, out: Console, top: int | None = None) -> None:
    """Configs ranked by their mean over seeds, with the spread."""
    arrow = "↓" if report.mode == "min" else "↑"
    table = Table(title=Text(printable(f"per config over seeds: mean {cap_text(report.metric, 200)} {arrow}, std, "
                                       "seeds reported")))
    table.add_column("#", justify="right")
    names = [p for p in report.params if p != "seed"]
    for p in names:
        table.add_column(cell(p), justify="right")
    for header in ("mean", "std", "n"):
        table.add_column(header, justify="right", style="bold" if header == "mean" else None)
    for i, c in enumerate(report.configs[:top] if top else report.configs, 1):
        n = f"{c.n}" if c.n == c.runs else f"{c.n} of {c.runs}"
        table.add_row(str(i), *(cell(c.params.get(p)) for p in names), cell(c.mean), cell(c.std) if c.std is not None else "-", n)
    out.print(table)


def cost_line(cost: SweepCost) -> str:
    line = f"cost: {cost.gpu_hours:.2f} GPU-h of running trials"
    if cost.cost is not None:
        line += f", {cost.cost:.2f} at the spot price"
    if cost.on_demand is not None and cost.cost is not None:
        line += f", {cost.on_demand:.2f} on demand (saved {cost.on_demand - cost.cost:.2f})"
    return line


def write_csv(report: Report, path: Path, metrics: Sequence[str] | None = None) -> int:
    """One row per trial: trial_name, state, one column per param, one per final metric
    (``metrics``, default every metric reported), attempts, preemptions, the error's last line.
    Every cell is one a spreadsheet shows as text (:func:`csv_cell`)."""
    metrics = report.every_metric if metrics is None else metrics
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        header = ["trial_name", "state", *report.params, *metric_columns(report, metrics), "attempts", "preemptions", "error"]
        writer.writerow([csv_cell(h) for h in header])
        column = {m: i for i, m in enumerate(metrics)}
        for row in [*report.ranked, *report.unranked]:
            # Filled from the trial's own metrics: with many names across trials most cells are empty,
            # and a row costs what the trial reported, not the width of the sheet.
            cells = [""] * len(metrics)
            for name, value in (row["metrics"] or {}).items():
                if (i := column.get(name)) is not None:
                    cells[i] = csv_cell(value)
            error = (row["error"] or "").strip().splitlines()[-1:]
            writer.writerow([
                csv_cell(row["trial_name"]), csv_cell(row["state"]), *(csv_cell(row["params"].get(p)) for p in report.params),
                *cells, row["attempts"], row["preemptions"], csv_cell(cap_text(error[0], ERROR_CHARS) if error else ""),
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
    """One row per sweep: state and trial counts by state (``spotsweep status``/``ls``), and what it
    spent (trials launched, steps, GPU-hours, cost) against its ``budget`` block as submitted."""
    where, args = [], []
    if sweep_id:
        where.append("sweep_id = %s")
        args.append(sweep_id)
    if name_glob:
        where.append("name SIMILAR TO %s")
        args.append(glob_to_similar(name_glob))
    sql = (  # the public view (not the smoke stage's trials); queued: pending or queued
        "SELECT sweep_id, name, state, error, note, planned AS total_trials, created_at, finished_at,"
        " completed, failed, cancelled, pruned, running, pending + queued AS queued,"
        " trials, steps, gpu_hours, cost, spec->'budget' AS budget FROM sweep_results"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY created_at DESC"
    )
    with db.transaction() as conn:
        return [dict(r) for r in conn.execute(sql, args).fetchall()]
