"""Settings come from SPOTSWEEP_* variables; secrets never reach the logs."""

import json
import subprocess
import sys

from spotsweep.shared.settings import Settings, redact_url


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
