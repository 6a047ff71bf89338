"""Fixtures of the security tests: RabbitMQ users per role from deploy/rabbitmq/definitions.json
(``users``), and a broker user of an agent's own whose password no other process holds (``agent_amqp``)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Cluster
from spotsweep.shared.broker.port import Broker
from waiting import wait_until

DEFINITIONS = Path(__file__).parents[2] / "deploy" / "rabbitmq" / "definitions.json"
HOST = os.environ.get("SPOTSWEEP_TEST_RABBIT_HOST", "127.0.0.1")
ROLES = ("planner", "collector", "agent", "submitter", "keda")


def _ctl(*args: str) -> str:
    return subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60).stdout


@pytest.fixture()
def users() -> Iterator[dict[str, str]]:
    """role -> AMQP URL of its user, from the definitions file loaded into a fresh vhost; ``admin``: guest."""
    suffix = uuid.uuid4().hex[:6]
    vhost = f"spotsweep-users-{suffix}"
    defs = json.loads(DEFINITIONS.read_text())
    names = {u["name"]: f"{u['name']}-{suffix}" for u in defs["users"]}
    passwords = {n: uuid.uuid4().hex for n in names.values()}
    for u in defs["users"]:
        u["name"] = names[u["name"]]
        u["password"] = passwords[u["name"]]
    for p in defs["permissions"]:
        p["user"] = names[p["user"]]
    defs["vhosts"] = [{"name": vhost}]
    for kind in ("permissions", "exchanges", "queues", "bindings"):
        for item in defs[kind]:
            item["vhost"] = vhost
    # A file the broker's CLI can read (it may run as RabbitMQ's user; this RabbitMQ takes no "-" for stdin).
    fd, path = tempfile.mkstemp(prefix="spotsweep-defs-", suffix=".json")
    try:
        os.write(fd, json.dumps(defs).encode())
        os.close(fd)
        os.chmod(path, 0o644)
        _ctl("import_definitions", path)
    finally:
        os.unlink(path)
    assert wait_until(lambda: all(n in _ctl("list_users") for n in names.values()), timeout=30)  # imported in the background
    assert wait_until(lambda: len(_ctl("list_permissions", "-p", vhost).splitlines()) >= len(names), timeout=30)
    _ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    urls = {role: f"amqp://{names['spotsweep-' + role]}:{passwords[names['spotsweep-' + role]]}@{HOST}:5672/{vhost}"
            for role in ROLES}
    urls["admin"] = f"amqp://guest:guest@{HOST}:5672/{vhost}"
    urls["_names"] = json.dumps({role: names["spotsweep-" + role] for role in ROLES})
    try:
        yield urls
    finally:
        _ctl("delete_vhost", vhost)
        for name in names.values():
            _ctl("delete_user", name)


@pytest.fixture()
def opened() -> Iterator[list[Broker]]:
    brokers: list[Broker] = []
    yield brokers
    for b in brokers:
        b.stop(drain=False)


@pytest.fixture()
def agent_amqp(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """(URL, password) of a RabbitMQ user of the agent's own in the cluster's vhost, with every
    permission there: a password that only the agent holds, to look for where a trial can see."""
    vhost = cluster.env["SPOTSWEEP_AMQP_URL"].rsplit("/", 1)[1]
    user, password = f"spotsweep-agent-{uuid.uuid4().hex[:6]}", f"amqp-{uuid.uuid4().hex}"
    _ctl("add_user", user, password)
    try:
        _ctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield f"amqp://{user}:{password}@{HOST}:5672/{vhost}", password
    finally:
        _ctl("delete_user", user)
