"""Settings come from SPOTSWEEP_* variables; secrets never reach the logs."""

import argparse
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field, SecretStr
from rich.console import Console
from servers import free_port

from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import AgentSettings, LocalSettings, PlannerSettings, Settings, redact_url


def test_settings_from_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPOTSWEEP_AMQP_URL", "amqp://u:pw@h:5672/v")
    monkeypatch.setenv("SPOTSWEEP_S3_SECRET_KEY", "s3cr3t")
    monkeypatch.setenv("SPOTSWEEP_S3_BUCKET", "bucket-x")
    s = Settings()
    assert s.amqp_url.get_secret_value() == "amqp://u:pw@h:5672/v"
    assert s.s3_bucket == "bucket-x"
    assert "s3cr3t" not in repr(s) and "pw@" not in repr(s)


def test_redact_url() -> None:
    assert redact_url("amqp://guest:hunter2@h:5672/%2F") == "amqp://guest:***@h:5672/%2F"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"
    assert redact_url("postgresql://u@h/db?password=hunter2&sslmode=require") == "postgresql://u@h/db?password=***&sslmode=require"
    assert redact_url("host=h password=hunter2 dbname=x") == "host=h password=*** dbname=x"
    assert redact_url("amqp://u:p@ss@h/v") == "amqp://u:***@h/v"  # a password holding an @
    assert redact_url("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"


def test_log_lines_are_json_with_ids_bound_and_secrets_scrubbed() -> None:
    code = """
from spotsweep.shared import log
log.configure("INFO", json=True)
with log.bound(sweep_id="sw", trial_id="sw.1", attempt=2):
    log.get().info("hello", url="amqp://guest:hunter2@h/v", s3_secret_key="abc", dsn="host=h password=hunter3")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    line = json.loads(out.strip().splitlines()[-1])
    assert (line["event"], line["sweep_id"], line["trial_id"], line["attempt"]) == ("hello", "sw", "sw.1", 2)
    assert "hunter2" not in out and "abc" not in out and "hunter3" not in out


def test_logs_go_to_the_stderr_of_the_moment_even_after_the_one_seen_at_configure_is_closed() -> None:
    code = """
import io, sys
from spotsweep.shared import log
first = io.StringIO()
sys.stderr = first
log.configure("INFO", json=True)
log.get("x").info("one")          # the module's logger is cached on first use
first.close()                      # an embedding program (a notebook, a test) closes its stream
second = io.StringIO()
sys.stderr = second
log.get("x").info("two")
sys.__stderr__.write(second.getvalue())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert json.loads(out.strip().splitlines()[-1])["event"] == "two"


def _stderr_of_submit(tty: bool) -> str:
    """``spotsweep submit`` to a broker that is not there: it logs its retries, then says why it stops."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env = {**base, "SPOTSWEEP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"}
    spec = str(Path(__file__).resolve().parents[2] / "examples" / "noop.yaml")
    if not tty:
        return subprocess.run([sys.executable, "-m", "spotsweep", "submit", spec], env=env, capture_output=True,
                              text=True, timeout=120).stderr
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "submit", spec], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=child)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child's end closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(60)
    os.close(main)
    return out.decode(errors="replace")


def test_services_log_readable_lines_on_a_terminal_and_json_lines_otherwise() -> None:
    on_terminal = [line for line in _stderr_of_submit(tty=True).splitlines() if "retrying" in line]
    assert on_terminal and not any(line.lstrip().startswith("{") for line in on_terminal), on_terminal
    assert "warning" in on_terminal[0] and "connect to RabbitMQ" in on_terminal[0]
    piped = [line for line in _stderr_of_submit(tty=False).splitlines() if "retrying" in line]
    assert piped and json.loads(piped[0])["event"] == "retrying"


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return subprocess.run([sys.executable, "-m", "spotsweep", *argv], env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=60)


def _settings_of(*argv: str) -> Settings:
    from spotsweep import cli

    return cli._settings(cli._parser().parse_args(list(argv)))


def test_each_process_reads_its_own_model_and_a_flag_wins_over_its_variable(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPOTSWEEP_GRACE", "12")
    monkeypatch.setenv("SPOTSWEEP_RESOURCE_CLASS", "cpu")
    monkeypatch.setenv("SPOTSWEEP_QUEUE_WINDOW", "3")
    agent = _settings_of("agent", "--grace", "7.5")
    assert isinstance(agent, AgentSettings)
    assert (agent.grace, agent.resource_class, agent.slots, agent.after_grace) == (7.5, "cpu", None, 30.0)
    planner = _settings_of("planner")
    assert isinstance(planner, PlannerSettings) and planner.queue_window == 3
    local = _settings_of("run", "spec.yaml", "--queue-window", "5")
    assert isinstance(local, LocalSettings) and local.queue_window == 5
    assert type(_settings_of("status")) is Settings


def test_local_mode_honours_the_queue_window(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """It once started its planner with the default whatever SPOTSWEEP_QUEUE_WINDOW said."""
    from spotsweep.services.local import run as local
    from spotsweep.shared.spec import parse_spec

    seen: list[int | None] = []

    def start(broker, db, resource_class, window, store, sweep_id):  # type: ignore[no-untyped-def]
        seen.append(window)
        raise KeyboardInterrupt  # stop before anything else starts

    monkeypatch.setattr(local, "_planner", start)
    monkeypatch.setenv("SPOTSWEEP_QUEUE_WINDOW", "4")
    spec = parse_spec({"name": "w", "command": ["true"], "space": {"x": [1]}, "metric": {"name": "m"}})
    with pytest.raises(KeyboardInterrupt):
        local.serve(spec, LocalSettings(home=tmp_path), 1, None, "w-0000000a", None,  # type: ignore[arg-type]
                    Console(file=io.StringIO()), dashboard=None)
    assert seen == [4]


def test_a_bad_flag_or_variable_is_named_with_its_value_and_exits_2() -> None:
    flag = _cli("agent", "--slots", "0")
    assert flag.returncode == 2 and "--slots='0'" in flag.stderr and "greater than or equal to 1" in flag.stderr
    assert "Traceback" not in flag.stderr
    var = _cli("planner", env={"SPOTSWEEP_QUEUE_WINDOW": "lots"})
    assert var.returncode == 2 and "SPOTSWEEP_QUEUE_WINDOW='lots'" in var.stderr and "Traceback" not in var.stderr
    choice = _cli("agent", "--preemption-notice", "ibm")
    assert choice.returncode == 2 and "--preemption-notice" in choice.stderr and "'ibm'" in choice.stderr


def test_a_bad_secret_is_named_without_showing_it() -> None:
    from spotsweep.shared.settings_cli import load

    class Strict(Settings):
        token: SecretStr = Field(min_length=40)

    with pytest.raises(PermanentError) as e:
        load(Strict, argparse.Namespace(token="hunter2"))
    assert "--token=***" in str(e.value) and "hunter2" not in str(e.value)


def test_the_settings_table_in_the_architecture_doc_is_the_models() -> None:
    """Every knob is documented, with the default it really has: the doc's table is generated."""
    from spotsweep.shared.settings_cli import table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    start = doc.index("<!-- settings-table")
    start = doc.index("\n", start) + 1
    assert doc[start:doc.index("<!-- /settings-table -->")] == table(), "regenerate it: see docs/architecture.md, Settings"
