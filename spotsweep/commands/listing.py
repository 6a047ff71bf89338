"""``spotsweep ls``: trials matching ``--filter KEY=GLOB``, the objective first, then the
params that vary within their sweep, a few other metrics, and how each trial's attempts ended.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.table import Table
from rich.text import Text

from spotsweep.commands.sweeps import database_if_any, print_json
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.safe import cell, shown
from spotsweep.services.reporter.values import metric_float
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings

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
    flagged = any(r.get("flags") for r in rows)  # the column exists from schema version 3 on
    objectives = _objectives(db, {r["sweep_id"] for r in rows}) if db is not None else {}
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
    reporter.console().print(table)
    if any(r.get("losses") for r in rows):
        print(LOST_RUNS, file=sys.stderr)
    return ExitCode.OK


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
