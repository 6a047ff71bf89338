"""``spotsweep status`` and ``ls``: the sweeps newest first with their trial counts, and the trials matching
``--filter KEY=GLOB``: the objective first, then the params that vary within their sweep, a few other metrics,
and how each trial's attempts ended.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from rich.table import Table
from rich.text import Text

from spotsweep.commands import command, idle_classes, positive
from spotsweep.commands.sweeps import database_if_any, print_json, said, unknown
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.budget_line import budget_line, caps_of, spent_of
from spotsweep.services.reporter.safe import cell, shown
from spotsweep.services.reporter.values import metric_float
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

STATUS_LIMIT = 20  # sweeps `status` shows unless told otherwise (2,000 sweeps printed 233 KB)


def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", nargs="?")
    p.add_argument("--json", action="store_true")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=positive, default=STATUS_LIMIT, metavar="N",
                       help=f"the newest N sweeps (default {STATUS_LIMIT})")
    shown.add_argument("--all", action="store_true", help="every sweep")


@command("status", _status_args)
def _status(args: argparse.Namespace, settings: Settings) -> int:
    return status(args.sweep, settings, args.json, limit=None if args.all else args.limit)


def status(sweep_id: str | None, settings: Settings, as_json: bool, limit: int | None = None) -> int:
    """Sweeps newest first, at most ``limit`` (None: all), and a line on stderr saying how many more."""
    db = database_if_any(settings)
    rows = [] if db is None else reporter.sweep_counts(db, sweep_id)
    if sweep_id and not rows:
        raise unknown(sweep_id)
    more = 0 if limit is None else max(0, len(rows) - limit)
    rows = rows[:limit]
    if more:  # stderr: the table and the JSON stay what they were
        print(f"{more:,} older sweep{'s' if more > 1 else ''} not shown: spotsweep status --limit N, or --all",
              file=sys.stderr)
    if as_json:
        print_json(rows)
        return ExitCode.OK
    table = Table(title="sweeps")
    # The id is what a user copies: never cut nor wrapped; a narrow terminal folds the other columns.
    table.add_column("sweep_id", no_wrap=True, min_width=max((len(shown(r["sweep_id"])) for r in rows), default=8))
    for col in ("name", "state", "total", "completed", "pruned", "running", "queued", "failed", "cancelled"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(cell(r["sweep_id"]), cell(r["name"]), r["state"], str(r["total_trials"]), str(r["completed"]),
                      str(r["pruned"]), str(r["running"]), str(r["queued"]), str(r["failed"]), str(r["cancelled"]))
    reporter.console().print(table)
    if db is not None:  # else no rows: nothing ran there
        _notes(db, settings, rows)
    return ExitCode.OK


def _notes(db: Database, settings: Settings, rows: list[dict[str, Any]]) -> None:
    """Below the table: classes no agent serves (stderr), then per sweep why it waits or ended, and its budget."""
    for warning in idle_classes.warnings_for(settings, idle_classes.waiting_classes(db)):
        print(warning, file=sys.stderr)
    unfit, staging = idle_classes.waiting_unfit(db), idle_classes.staging(db)
    for r in rows:
        sweep = shown(r["sweep_id"])
        if r["sweep_id"] in staging:
            print(f"{sweep}: staging: {staging[r['sweep_id']]} queued trial(s) being set up on their "
                  "agents (inputs, setup.pip env, image), not yet training")
        if r["sweep_id"] in unfit:
            print(f"{sweep}: waiting: {unfit[r['sweep_id']]}")
        if r["state"] in ("rejected", "failed") and r["error"]:
            print(f"{sweep} {r['state']}: {said(r['error'])}")
        if r["note"]:
            print(f"{sweep}: {said(r['note'])}")
        if (line := budget_line(caps_of(r["budget"]), spent_of(r, datetime.now(timezone.utc)))) is not None:
            print(f"{sweep}: {line}")


def _ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", action="append", default=[], metavar="KEY=GLOB", help="name=, state= or sweep= (repeatable)")
    p.add_argument("--json", action="store_true")


@command("ls", _ls_args)
def _ls(args: argparse.Namespace, settings: Settings) -> int:
    return list_trials(args.filter, settings, args.json)


_FILTER_COLUMNS = {"name": "trial_name", "state": "state", "sweep": "sweep_id", "sweep_name": "sweep_name"}


def list_trials(filters: list[str], settings: Settings, as_json: bool) -> int:
    """Trials matching every ``key=glob`` filter."""
    wanted: list[tuple[str, str]] = []
    for f in filters:
        key, sep, pattern = f.partition("=")
        if not sep or key not in _FILTER_COLUMNS:
            raise PermanentError(f"--filter {f!r}: expected KEY=GLOB with KEY one of {', '.join(_FILTER_COLUMNS)}")
        wanted.append((_FILTER_COLUMNS[key], pattern))
    where = " AND ".join(f"{col} SIMILAR TO %s" for col, _ in wanted) or "true"
    db = database_if_any(settings)
    rows = []
    if db is not None:
        with db.transaction() as conn:
            rows = conn.execute(f"SELECT * FROM trial_results WHERE {where} ORDER BY sweep_id, trial_name",
                                [reporter.glob_to_similar(pat) for _, pat in wanted]).fetchall()
    if as_json:
        print_json(rows)
        return ExitCode.OK
    reporter.console().print(_trials_table(rows, _objectives(db, {r["sweep_id"] for r in rows}) if db is not None else {}))
    if any(r.get("losses") for r in rows):
        print(LOST_RUNS, file=sys.stderr)
    return ExitCode.OK


def _trials_table(rows: list[dict[str, Any]], objectives: dict[str, str]) -> Table:
    """One row per trial: its objective (of ``objectives``, per sweep) first, the params that vary, other metrics."""
    flagged = any(r.get("flags") for r in rows)  # the column exists from schema version 3 on
    varying = _varying(rows)
    table = Table()
    for col in ("trial_name", "sweep_id", "state", "attempts", "objective", "params", "metrics", *(("flags",) if flagged else ())):
        table.add_column(col)
    for r in rows:
        flags = (Text(" ".join(f"[{shown(f)}]" for f in r.get("flags") or [])),) if flagged else ()
        metrics, objective = dict(r["metrics"] or {}), objectives.get(r["sweep_id"])
        first = f"{shown(objective)}={_short(metrics.pop(objective))}" if objective in metrics else "-"
        params = " ".join(f"{shown(k)}={_short(v)}" for k, v in sorted((r["params"] or {}).items())
                          if k in varying.get(r["sweep_id"], ()))
        table.add_row(cell(r["trial_name"]), cell(r["sweep_id"]), r["state"], attempts_cell(r), Text(first),
                      Text(params), Text(metrics_line(metrics)), *flags)
    return table


LOST_RUNS = ("lost run: a run whose agent vanished (a node lost, a kill -9); the same attempt ran again from the "
             "trial's last checkpoint, so it is counted as a loss, not as another attempt")


def attempts_cell(row: dict[str, Any]) -> str:
    """Attempts, and what ended the earlier ones: ``3 (1 preempted, 1 failed) +1 lost run``."""
    ended = [f"{n} {what}" for what, n in (("preempted", row.get("preemptions")), ("failed", row.get("failures"))) if n]
    lost = row.get("losses") or 0
    return (f"{row['attempts']}" + (f" ({', '.join(ended)})" if ended else "")
            + (f" +{lost} lost run{'s' if lost > 1 else ''}" if lost else ""))


def _objectives(db: Database, sweep_ids: set[str]) -> dict[str, str]:
    """Each sweep's objective (its first metric's name)."""
    with db.transaction() as conn:
        specs = conn.execute("SELECT sweep_id, spec FROM sweep_results WHERE sweep_id = ANY(%s)", (list(sweep_ids),)).fetchall()
    out = {}
    for row in specs:
        metric = (row["spec"] or {}).get("metric")
        first = metric[0] if isinstance(metric, list) and metric else metric
        if isinstance(first, dict) and isinstance(first.get("name"), str):
            out[row["sweep_id"]] = first["name"]
    return out


def _varying(rows: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per sweep, the params whose values differ among its listed trials (the constant ones tell nothing)."""
    seen: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        for k, v in (r["params"] or {}).items():
            seen.setdefault(r["sweep_id"], {}).setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    return {sweep: {k for k, values in params.items() if len(values) > 1} for sweep, params in seen.items()}


LS_METRICS = 8  # metrics shown per trial by `ls` (a trial may report a thousand)


def metrics_line(metrics: dict[str, Any], most: int = LS_METRICS) -> str:
    """``name=value, ...`` of the first ``most`` metrics by name, saying how many more;
    non-finite values as ``nan``/``inf``, every name escaped."""
    names = sorted(metrics, key=lambda k: (str(k).startswith("sys/"), k))  # resource samples last
    line = ", ".join(f"{shown(k)}={_short(metrics[k])}" for k in names[:most])
    return line + (f", ... {len(names) - most} more" if len(names) > most else "")


def _short(value: object) -> str:
    number = metric_float(value)
    return f"{number:.4g}" if number is not None else shown(value)
