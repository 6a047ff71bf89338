"""The command line as a user meets it: exit codes, messages, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from servers import free_port
from spotsweep import __version__
from waiting import wait_until


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=120)


def test_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"spotsweep {__version__}"


def test_schema_prints_the_spec_and_message_schemas() -> None:
    proc = cli("schema")
    assert proc.returncode == 0
    schemas = json.loads(proc.stdout)
    assert "space" in json.dumps(schemas["spec"]) and "trial.finished" in json.dumps(schemas["messages"])


def test_status_on_a_fresh_database_is_empty_not_an_error(database_url: str) -> None:
    env = {"SPOTSWEEP_DATABASE_URL": database_url}
    for args in (("status", "--json"), ("ls", "--json")):
        proc = cli(*args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == []
    import psycopg

    with psycopg.connect(database_url) as conn:  # readers never migrate
        assert conn.execute("SELECT to_regclass('trials')").fetchone() == (None,)


def test_readers_of_an_older_schema_say_to_migrate_and_migrate_does_it(database_url: str) -> None:
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()
    with psycopg.connect(database_url, autocommit=True) as conn:  # as if a newer spotsweep's migration were pending
        last = conn.execute("SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc DESC LIMIT 1").fetchone()
        conn.execute("DELETE FROM _yoyo_migration WHERE migration_id = %s", last)
    env = {"SPOTSWEEP_DATABASE_URL": database_url}
    proc = cli("ls", env=env)
    assert proc.returncode == 2 and f"lacks migration(s) {last[0]}" in proc.stderr and "spotsweep migrate" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = cli("migrate", env=env)
    assert proc.returncode == 0 and f"applied migration(s): {last[0]}" in proc.stdout, proc.stderr
    assert cli("migrate", env=env).stdout.strip() == "the schema is up to date"
    assert cli("ls", env=env).returncode == 0


def test_report_of_an_unknown_sweep_names_it(database_url: str) -> None:
    proc = cli("report", "nope-123", env={"SPOTSWEEP_DATABASE_URL": database_url})
    assert proc.returncode == 2 and "no sweep has the id or name 'nope-123'" in proc.stderr and "Traceback" not in proc.stderr


def test_submit_refuses_a_bad_spec_before_touching_the_broker(tmp_path: Path) -> None:
    spec = tmp_path / "s.json"
    spec.write_text('{"name": "x", "command": ["echo"], "metric": {"name": "v"}, "space": {"a": []}}')
    proc = cli("submit", str(spec), env={"SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2F"})
    assert proc.returncode == 2 and "space.a" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_broker_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\ncommand: [echo]\nmetric: {name: v}\nspace: {a: [1]}\n")
    env = {"SPOTSWEEP_AMQP_URL": "amqp://guest:hunter2@127.0.0.1:1/%2F"}
    proc = cli("submit", str(spec), env=env)  # the CLI gives up after a few seconds
    assert proc.returncode == 69, proc.stderr
    assert "cannot connect to RabbitMQ" in proc.stderr and "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


def test_ls_filter_syntax_errors_name_the_filter(database_url: str) -> None:
    proc = cli("ls", "--filter", "colour=red", env={"SPOTSWEEP_DATABASE_URL": database_url})
    assert proc.returncode == 2 and "--filter 'colour=red'" in proc.stderr


def test_validate_warns_about_likely_mistakes_but_accepts_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text("name: w\ncommand: [python, trian.py, --x, '{n}']\nmetric: {name: v}\nspace: {n: [1, 2]}\nrepeats: 3\n")
    proc = cli("validate", str(spec))
    assert proc.returncode == 0 and proc.stdout.startswith("ok: w: 6 trial(s)")
    assert "warning: repeats: 3 but no {seed} in command" in proc.stderr
    assert "warning: command[1]: 'trian.py' is not a file next to the spec" in proc.stderr


def test_positive_counts_are_checked_by_the_parser() -> None:
    proc = cli("run", "examples/noop.yaml", "--workers", "0")
    assert proc.returncode == 2 and "--workers: must be at least 1, got 0" in proc.stderr


def test_extend_names_what_is_wrong_before_posting_anything(database_url: str) -> None:
    env = {"SPOTSWEEP_DATABASE_URL": database_url, "SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2F"}
    proc = cli("extend", "nope-123", "--trials", "5", env=env)
    assert proc.returncode == 2 and "no sweep has the id or name 'nope-123'" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("extend", "nope-123", env=env)
    assert proc.returncode == 2 and "give --trials and/or a budget" in proc.stderr
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()  # as the planner does when it starts (readers never migrate)
    spec = {"name": "g", "command": ["t"], "metric": {"name": "loss"}, "space": {"x": [1, 2]}, "strategy": {"type": "grid"}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('g-1', 'g', %s, 'completed', 2)",
                     (json.dumps(spec),))
    proc = cli("extend", "g-1", "--trials", "1", env=env)
    assert proc.returncode == 2 and "trials: the grid's 2 configurations are all in the sweep already" in proc.stderr


def test_an_agent_does_not_load_the_planner_s_numerics(tmp_path: Path) -> None:
    """A GPU node's agent runs trials; Optuna, NumPy and SciPy (the planner's
    search) would only cost it memory and an OpenBLAS thread."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env = {**base, "SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/",  # nothing listens: it keeps retrying
           "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"]}
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "agent", "--workdir", str(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not any("connect to RabbitMQ" in line for line in lines) and len(lines) < 20:
            lines.append(proc.stderr.readline())  # imports are done once it tries to connect (after start-up warnings)
        assert "connect to RabbitMQ" in lines[-1], lines
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        proc.kill()
        proc.wait()
    assert "_multiarray_umath" not in maps and "openblas" not in maps and "scipy" not in maps


def test_cancel_and_extend_of_an_unknown_sweep_are_refused_and_post_nothing(database_url: str) -> None:
    """A typo (or a 100 KB id) is refused with exit 2 before anything is posted: the broker here is unreachable,
    so a post would exit 69; the planner never sees the id and writes no row for it."""
    env = {"SPOTSWEEP_DATABASE_URL": database_url, "SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2F"}
    proc = cli("cancel", "nope-0000000a", env=env)
    assert proc.returncode == 2 and "no sweep has the id or name 'nope-0000000a'" in proc.stderr and "Traceback" not in proc.stderr
    huge = "x\x1b[2J" * 20_000
    for command in (["cancel", huge], ["extend", huge, "--trials", "1"]):
        proc = cli(*command, env=env)
        assert proc.returncode == 2 and "no sweep has the id or name 'x\\\\x1b[2Jx" in proc.stderr, proc.stderr[:500]
        assert "\x1b" not in proc.stderr and len(proc.stderr) < 2000
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()  # as the planner does when it starts (readers never migrate)
    with psycopg.connect(database_url, autocommit=True) as conn:  # a row an older planner let in under a raw header
        conn.execute("INSERT INTO sweeps (sweep_id, name, state) VALUES ('../../evil/x', 'x', 'running')")
        assert conn.execute("SELECT count(*) FROM sweeps").fetchone() == (1,)
    proc = cli("cancel", "../../evil/x", env=env)
    assert proc.returncode == 2 and "is not of the form NAME-<8 hex digits>" in proc.stderr


def test_report_metrics_flag_names_what_is_missing(database_url: str) -> None:
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()
    spec = {"name": "m", "command": ["t"], "metric": {"name": "loss"}, "space": {"x": [1]}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('m-0000000a', 'm', %s,"
                     " 'completed', 1)", (json.dumps(spec),))
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, metrics) VALUES"
                     " ('m.0', 'm-0000000a', 0, 'm_0', '{\"x\": 1}', 'completed', '{\"loss\": \"NaN\", \"acc\": 0.5}')")
    env = {"SPOTSWEEP_DATABASE_URL": database_url}
    proc = cli("report", "m-0000000a", "--metrics", "acc", env=env)
    assert proc.returncode == 0 and " nan " in proc.stdout and "0.5" in proc.stdout, proc.stderr
    proc = cli("report", "m-0000000a", "--metrics", "accuracy", env=env)
    assert proc.returncode == 2 and "--metrics: no trial of this sweep reported 'accuracy' (2 metric(s): loss, acc)" in proc.stderr
    proc = cli("report", "m-0000000a", "--metrics", ",", env=env)
    assert proc.returncode == 2 and "expected NAME,NAME" in proc.stderr


def test_submit_wait_without_a_results_database_stops_at_once_naming_it(tmp_path: Path) -> None:
    """--wait would watch local mode's embedded database, which a submitted sweep never reaches: it hung forever."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ncommand: [python, -c, pass]\nmetric: {name: v}\nspace: {a: [1]}\n")
    env = {"SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2F", "SPOTSWEEP_HOME": str(tmp_path / "home")}
    proc = cli("submit", str(spec), "--wait", env=env)
    assert proc.returncode == 2 and "SPOTSWEEP_DATABASE_URL" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "home" / "pg").exists()  # nothing was started, nothing posted (the broker is unreachable: 69)


def test_status_shows_the_newest_sweeps_says_how_many_more_and_all_shows_them(database_url: str) -> None:
    """2,000 sweeps made ``status`` print 233 KB: it pages, newest first."""
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, state, created_at) SELECT 's-' || lpad(i::text, 2, '0'),"
                     " 'n', 'completed', now() - (30 - i) * interval '1 minute' FROM generate_series(1, 25) i")
    env = {"SPOTSWEEP_DATABASE_URL": database_url}

    def shown(proc: subprocess.CompletedProcess[str]) -> list[str]:
        assert proc.returncode == 0, proc.stderr
        return [r["sweep_id"] for r in json.loads(proc.stdout)]

    default = cli("status", "--json", env=env)
    assert shown(default) == [f"s-{i:02d}" for i in range(25, 5, -1)]  # the 20 newest, newest first
    assert "5 older sweeps not shown: spotsweep status --limit N, or --all" in default.stderr
    table = cli("status", env=env)
    assert "s-25" in table.stdout and "s-05" not in table.stdout and "5 older sweeps not shown" in table.stderr
    assert shown(cli("status", "--limit", "3", "--json", env=env)) == ["s-25", "s-24", "s-23"]
    every = cli("status", "--all", "--json", env=env)
    assert len(shown(every)) == 25 and "not shown" not in every.stderr
    assert shown(cli("status", "s-01", "--json", env=env)) == ["s-01"]  # one sweep by id, however old
    bad = cli("status", "--limit", "0", env=env)
    assert bad.returncode == 2 and "--limit" in bad.stderr and "Traceback" not in bad.stderr


def test_cancel_and_extend_refuse_a_sweep_a_local_run_elsewhere_runs(database_url: str) -> None:
    """A `spotsweep run` with SPOTSWEEP_DATABASE_URL set runs its planner in its own process: no
    planner reads the sweeps queue for that sweep, so a posted cancel would lie there unread."""
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()
    spec = {"name": "loc", "command": ["t"], "metric": {"name": "loss"}, "space": {"x": [1, 2]}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES ('loc-0000000a', 'loc', %s,"
                     " 'running', 2)", (json.dumps(spec),))
        conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, state, agent) VALUES"
                     " ('loc-0000000a-0', 'loc-0000000a', 0, 't0', '{}', 'running', 'local')")
    env = {"SPOTSWEEP_DATABASE_URL": database_url, "SPOTSWEEP_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2F"}
    for command in (["cancel", "loc"], ["extend", "loc-0000000a", "--max-trials", "3"]):
        proc = cli(*command, env=env)
        assert proc.returncode == 2 and "'loc-0000000a' was run by `spotsweep run` with another SPOTSWEEP_HOME" in proc.stderr, \
            proc.stderr


def test_status_never_cuts_a_sweep_id_and_ls_shows_the_objective_then_the_varying_params(database_url: str) -> None:
    import psycopg

    from spotsweep.shared.db import Database

    Database(database_url).migrate()
    sweep_id = "a-rather-long-sweep-name-that-a-user-must-copy-whole-0000000a"
    spec = {"name": "long", "command": ["t"], "metric": {"name": "zloss"}, "space": {"x": [1, 2], "y": [3]}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO sweeps (sweep_id, name, spec, state, total_trials) VALUES (%s, 'long', %s, 'completed', 2)",
                     (sweep_id, json.dumps(spec)))
        for i, losses in ((0, 0), (1, 1)):
            conn.execute("INSERT INTO trials (trial_id, sweep_id, idx, trial_name, params, metrics, state, losses)"
                         " VALUES (%s, %s, %s, %s, %s, %s, 'completed', %s)",
                         (f"{sweep_id}.{i}", sweep_id, i, f"t{i}", json.dumps({"x": i + 1, "y": 3}),
                          json.dumps({"acc": 0.9, "sys/cpu_percent": 50.0, "zloss": 0.25 + i}), losses))
    env = {"SPOTSWEEP_DATABASE_URL": database_url, "COLUMNS": "80"}
    status = cli("status", env=env)
    assert status.returncode == 0 and sweep_id in status.stdout, status.stdout
    listed = cli("ls", env={**env, "COLUMNS": "240"})
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "│ t1 " in line)
    assert row.index("zloss=1.25") < row.index("x=2") < row.index("acc=0.9") < row.index("sys/cpu_percent=50")
    assert "y=3" not in row  # the same in every trial: it tells nothing
    assert "1 +1 lost run" in row and "the same attempt ran again from the trial's last checkpoint" in listed.stderr


def test_dashboard_says_where_to_open_it_once_it_answers(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    err = tmp_path / "err"
    with err.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "dashboard", "--port", str(port)],
                                env={**env, "SPOTSWEEP_HOME": str(tmp_path / "home")}, stdout=subprocess.DEVNULL,
                                stderr=out, text=True)
    try:
        assert wait_until(lambda: "dashboard: open" in err.read_text(), timeout=60), err.read_text()
        assert f"dashboard: open http://127.0.0.1:{port}/ (Ctrl-C stops it)\n" in err.read_text()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, err.read_text()
