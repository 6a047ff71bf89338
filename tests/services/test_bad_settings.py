"""A missing or wrong setting at a service's start (issue 20, "Bad input and faults").

Each case starts the real service as a process against the real RabbitMQ,
PostgreSQL or an S3 server that refuses, and expects it to stop within
seconds (a subprocess timeout bounds every run) with exit 69 (something
refused or unreachable) or 2 (a setting missing or invalid), its last line
naming the setting, and never the password or a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterator

import pytest

from tests.support.servers import free_port, wait_port

PASSWORD = "Wr0ng-pass"


def run(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """(exit code, last line of stderr) of ``spotsweep ARGS``; the whole output holds no password nor traceback."""
    done = subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    assert PASSWORD not in output and "Traceback" not in output, output
    lines = done.stderr.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


@pytest.fixture()
def bare(tmp_path: Path) -> dict[str, str]:
    """Settings of services that stop before they reach any server (nothing listens at these URLs)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return {**base, "HOME": str(tmp_path), "SPOTSWEEP_HOME": str(tmp_path / "home"), "SPOTSWEEP_STARTUP_TIMEOUT": "3",
            "SPOTSWEEP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F",
            "SPOTSWEEP_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/db",
            "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"]}  # tests/conftest.py


@pytest.fixture()
def env(bare: dict[str, str], rabbit_url: str, database_url: str) -> dict[str, str]:
    return {**bare, "SPOTSWEEP_AMQP_URL": rabbit_url, "SPOTSWEEP_DATABASE_URL": database_url}


@pytest.mark.parametrize("service", ["planner", "collector", "agent"])
def test_a_wrong_broker_password_stops_a_service_at_once_with_69(env: dict[str, str], service: str) -> None:
    vhost = env["SPOTSWEEP_AMQP_URL"].rsplit("/", 1)[1]
    env["SPOTSWEEP_AMQP_URL"] = f"amqp://guest:{PASSWORD}@127.0.0.1:5672/{vhost}"
    env["SPOTSWEEP_STARTUP_TIMEOUT"] = "600"  # a refused login is not waited for
    code, last = run([service], env)
    assert code == 69, last
    assert last == (f"error: SPOTSWEEP_AMQP_URL: RabbitMQ at amqp://guest:***@127.0.0.1:5672/{vhost} refused the login "
                    "(wrong user or password)")


def test_a_broker_vhost_that_does_not_exist_stops_the_agent_with_69(env: dict[str, str]) -> None:
    env["SPOTSWEEP_AMQP_URL"] = "amqp://guest:guest@127.0.0.1:5672/no-such-vhost"
    env["SPOTSWEEP_STARTUP_TIMEOUT"] = "600"
    code, last = run(["agent"], env)
    assert code == 69 and last.startswith("error: SPOTSWEEP_AMQP_URL: RabbitMQ at amqp://guest:***@") \
        and "refused access to the virtual host" in last, last


def test_no_broker_where_the_url_points_is_69_after_the_startup_timeout(bare: dict[str, str], database_url: str) -> None:
    """No SPOTSWEEP_AMQP_URL reachable (nothing listens there): retried for --startup-timeout, then 69."""
    env = {**bare, "SPOTSWEEP_DATABASE_URL": database_url}
    env["SPOTSWEEP_AMQP_URL"] = f"amqp://guest:{PASSWORD}@127.0.0.1:{free_port()}/%2F"
    code, last = run(["collector", "--startup-timeout", "2"], env)
    assert code == 69 and last.startswith("error: SPOTSWEEP_AMQP_URL: RabbitMQ at amqp://guest:***@127.0.0.1:") \
        and "did not answer within 2 s (--startup-timeout)" in last, last


def test_a_database_that_does_not_exist_stops_the_planner_at_once_with_69(bare: dict[str, str], database_url: str) -> None:
    env = {**bare, "SPOTSWEEP_DATABASE_URL": database_url.rsplit("/", 1)[0] + "/no_such_database"}
    env["SPOTSWEEP_STARTUP_TIMEOUT"] = "600"
    code, last = run(["planner"], env)
    assert code == 69 and last.startswith("error: SPOTSWEEP_DATABASE_URL: PostgreSQL at postgresql://postgres@") \
        and "refused the connection" in last and "does not exist" in last, last


@pytest.mark.parametrize("service", ["planner", "collector"])
def test_a_missing_or_unreadable_database_url_is_2(bare: dict[str, str], service: str) -> None:
    env = dict(bare)
    del env["SPOTSWEEP_DATABASE_URL"]
    assert run([service], env) == (2, f"error: SPOTSWEEP_DATABASE_URL is not set: the {service} needs PostgreSQL")
    env["SPOTSWEEP_DATABASE_URL"] = f"postgresql://postgres:{PASSWORD}@[::1:5432/db"
    code, last = run([service], env)
    assert code == 2 and last.startswith("error: SPOTSWEEP_DATABASE_URL "), last


@pytest.mark.parametrize(("args", "named"), [
    (["agent", "--metrics-port", "0"], "--metrics-port='0'"),
    (["planner", "--metrics-port", "http"], "--metrics-port='http'"),
    (["agent", "--exit-when-idle", "-1"], "--exit-when-idle='-1'"),
    (["collector", "--startup-timeout", "soon"], "--startup-timeout='soon'"),
])
def test_an_invalid_value_is_2_naming_its_flag(bare: dict[str, str], args: list[str], named: str) -> None:
    code, last = run(args, bare)
    assert code == 2 and last.startswith(f"error: {named}: "), last


def test_a_metrics_port_in_use_is_2_naming_it(bare: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, last = run(["agent", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"], bare)
    assert code == 2 and last.startswith(f"error: --metrics-port {port}: cannot listen on 127.0.0.1:{port}"), last


@pytest.fixture()
def read_only_s3() -> Iterator[dict[str, str]]:
    """moto's S3 with authentication, and SPOTSWEEP_S3_* of a key that may read the bucket but not write it."""
    import boto3

    port = free_port()
    # moto takes this many calls without credentials (the set-up below), then checks every call against its IAM.
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        admin = {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1", "aws_access_key_id": "admin",
                 "aws_secret_access_key": "admin-secret"}
        boto3.client("s3", **admin).create_bucket(Bucket="spotsweep-read-only")
        iam = boto3.client("iam", **admin)
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                                                   {"Effect": "Deny", "Action": "s3:PutObject", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        yield {"SPOTSWEEP_S3_ENDPOINT": admin["endpoint_url"], "SPOTSWEEP_S3_BUCKET": "spotsweep-read-only",
               "SPOTSWEEP_S3_REGION": "us-east-1", "SPOTSWEEP_S3_ACCESS_KEY": key["AccessKeyId"],
               "SPOTSWEEP_S3_SECRET_KEY": key["SecretAccessKey"]}
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_bucket_the_agent_cannot_write_stops_it_with_69(bare: dict[str, str], read_only_s3: dict[str, str]) -> None:
    code, last = run(["agent", "--require-s3"], {**bare, **read_only_s3})  # it stops before it connects to RabbitMQ
    assert code == 69, last
    assert last.startswith("error: SPOTSWEEP_S3_BUCKET/SPOTSWEEP_S3_ACCESS_KEY: the agent cannot write to its artifact "
                           "store S3ArtifactStore(endpoint='http://127.0.0.1:"), last
    assert "AccessDenied" in last and read_only_s3["SPOTSWEEP_S3_SECRET_KEY"] not in last, last


def test_no_broker_url_at_all_names_the_variable_and_its_default(bare: dict[str, str]) -> None:
    """Unset, SPOTSWEEP_AMQP_URL is a broker on this machine; in a container there is none: 69, saying so.
    Run in a network namespace of its own (``unshare -n``), where nothing listens on this machine's loopback."""
    env = {k: v for k, v in bare.items() if k != "SPOTSWEEP_AMQP_URL"}
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here (unshare -n): {probe.stderr.decode().strip()}")
    done = subprocess.run(["unshare", "-n", sys.executable, "-m", "spotsweep", "agent", "--startup-timeout", "1"],
                          env=env, capture_output=True, text=True, timeout=60)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 69 and last.startswith(
        "error: SPOTSWEEP_AMQP_URL (not set: the default): RabbitMQ at amqp://guest:***@127.0.0.1:5672/%2F did not "
        "answer within 1 s"), last
