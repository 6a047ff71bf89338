"""Issue 19 section 5: no password is ever printed, whole or in pieces, and no traceback.

Every service and the CLI's reading commands start with a wrong password
holding ``@``, ``:`` and ``/`` in the broker URL, the database URL and the
S3 secret key, once raw (which libpq and pika split into a host and a
port, then quote: the two leaks the issue found) and once percent-encoded
(a well-formed URL RabbitMQ refuses). Their whole output, stdout and stderr,
over a few retries, holds neither the password nor any piece of it.
A malformed database URL (``[::1`` without ``]``) is a clear error, exit 2.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from spotsweep.shared.redact import pieces
from servers import free_port
from waiting import wait_until

PASSWORD = "Qz9@Wv7:Kx4/Jm2"
SERVICES = ("planner", "collector", "agent", "dashboard")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _env(rabbit_url: str, database_url: str, s3_env: dict[str, str], tmp_path: Path, password: str) -> dict[str, str]:
    vhost = rabbit_url.rsplit("/", 1)[1]
    db = database_url.rsplit("/", 1)[1]
    return {
        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPOTSWEEP_HOME": str(tmp_path / "home"),
        **s3_env, "SPOTSWEEP_S3_SECRET_KEY": password,
        "SPOTSWEEP_AMQP_URL": f"amqp://guest:{password}@127.0.0.1:5672/{vhost}",
        "SPOTSWEEP_DATABASE_URL": f"postgresql://postgres:{password}@127.0.0.1:5432/{db}",
        "SPOTSWEEP_DASHBOARD_PORT": str(free_port()), "SPOTSWEEP_SLOTS": "1", "SPOTSWEEP_RESOURCE_CLASS": "cpu",
        "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"],
    }


def _leaks(text: str) -> list[str]:
    """The password's pieces (3 characters or more) found in ``text``, and a traceback."""
    found = [p for p in pieces(PASSWORD, shortest=3) if p in text]
    return found + (["Traceback"] if "Traceback" in text else [])


@pytest.mark.parametrize("encode", [False, True], ids=["raw", "percent-encoded"])
def test_no_service_or_command_prints_the_password(rabbit_url: str, database_url: str, s3_env: dict[str, str],
                                                    tmp_path: Path, encode: bool) -> None:
    env = _env(rabbit_url, database_url, s3_env, tmp_path, quote(PASSWORD, safe="") if encode else PASSWORD)
    logs: dict[str, Path] = {}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name in SERVICES:  # all at once: each retries for about a minute, and we read a few seconds of it
        logs[name] = tmp_path / f"{name}.log"
        with logs[name].open("wb") as out:
            procs[name] = subprocess.Popen([sys.executable, "-m", "spotsweep", name], env=env, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
    outputs: dict[str, str] = {}
    for command in (["status"], ["ls"], ["submit", str(EXAMPLES / "noop.yaml")]):
        done = subprocess.run([sys.executable, "-m", "spotsweep", *command], env=env, capture_output=True, text=True,
                              timeout=120)
        outputs[" ".join(command[:1])] = done.stdout + done.stderr
    try:
        # A few retries each (or its end): two lines of output at least.
        wait_until(lambda: all(p.poll() is not None or len(logs[n].read_bytes().splitlines()) >= 2
                               for n, p in procs.items()), timeout=60)
    finally:
        for p in procs.values():  # only their output matters (a service still retrying at start ignores SIGTERM)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    outputs.update((name, path.read_text(errors="replace")) for name, path in logs.items())
    for name, text in outputs.items():
        assert text.strip(), f"{name} printed nothing: the test would prove nothing"
        assert _leaks(text) == [], f"{name} printed {_leaks(text)}:\n{text[-3000:]}"


def test_a_malformed_database_url_is_a_clear_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "SPOTSWEEP_DATABASE_URL": f"postgresql://postgres:{quote(PASSWORD, safe='')}@[::1:5432/postgres"}
    for command in (["ls"], ["status"], ["migrate"]):
        done = subprocess.run([sys.executable, "-m", "spotsweep", *command], env=env, capture_output=True, text=True,
                              timeout=60)
        text = done.stdout + done.stderr
        assert done.returncode == 2, text
        assert "SPOTSWEEP_DATABASE_URL" in text and "IPv6" in text, text
        assert _leaks(text) == [], text
