"""URL inputs that point inside the node's network, never end, drip or fail, through the real services (issue 39, 2).

One agent (process runtime, two slots) runs with ``--allow-input-hosts 127.0.0.1`` (the test servers are on
loopback: the clean cases pass only because the operator allows that host, which tests the allow-list too),
``--max-input-bytes 1Mi`` and ``--input-deadline 15``. A "metadata service" stand-in listens on 127.0.0.2, which
is not allowed. Each hostile sweep ends with its trial failed and the reason in its error, as an input error,
never "lost with its agent"; then the bystander and a clean sweep with a URL input complete on the same agent.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from hostile import Hostile, bystander_spec
from http_servers import Server, body, redirect, self_signed, status

pytestmark = pytest.mark.integration

DEADLINE_S = 15
GOOD = b"tokens" * 1000


def spec(name: str, url: str, sha256: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", "import os; from spotsweep import trial; "
                                    "trial.report(1, n=len(os.listdir('data')))"],
        "metric": {"name": "n"},
        "resources": {"gpus": 0, "class": "cpu"},
        "retries": {"max_failures": 0},
        "inputs": [{"from": url, "to": "data", **({"sha256": sha256} if sha256 else {})}],
    }


@pytest.fixture()
def servers(tmp_path: Path) -> Iterator[dict[str, Any]]:
    pem = self_signed(tmp_path)
    hung_up: list[float] = []
    inner = Server(routes={"/latest/meta-data/iam/credentials": body(40, b"AKIA-fake-instance-credentials-0123456")},
                   host="127.0.0.2")
    plain = Server(routes={"/endless": body(None), "/500": status(500), "/short": body(10, announced=1000),
                           "/drip": body(None, b"x", every=0.5, hung_up=hung_up),
                           "/to-inner": redirect(inner.url("latest/meta-data/iam/credentials"))})
    tls = Server(routes={"/good.bin": body(len(GOOD), GOOD),
                         "/downgrade": redirect(plain.url("to-inner"))}, pem=pem)
    yield {"inner": inner, "plain": plain, "tls": tls, "hung_up": hung_up, "cert": tmp_path / "cert.pem"}
    for s in (inner, plain, tls):
        s.close()


@pytest.fixture()
def hostile(cluster: Cluster, database_url: str, rabbit_url: str, tmp_path: Path,
            servers: dict[str, Any]) -> Hostile:
    h = Hostile(cluster, database_url, rabbit_url, tmp_path)
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu", "--workdir", str(tmp_path / "agent"),
                  "--allow-input-hosts", "127.0.0.1", "--max-input-bytes", "1Mi", "--input-deadline", str(DEADLINE_S),
                  env={"SSL_CERT_FILE": str(servers["cert"])})
    h.bystander = h.submit(bystander_spec())
    return h


def failed_with(hostile: Hostile, sweep_id: str, *needles: str) -> str:
    """The sweep's one trial failed as an input error whose text holds every needle; that text."""
    hostile.wait_sweep(sweep_id, timeout=120)
    [row] = hostile.trials(sweep_id)
    error = row["error"] or ""
    assert row["state"] == "failed" and all(n in error for n in needles), (row, hostile.cluster.logs())
    assert "lost with its agent" not in error and row["losses"] in (0, None), row
    return error


def test_url_inputs_reach_no_internal_address_and_stall_no_slot(hostile: Hostile, servers: dict[str, Any]) -> None:
    plain, tls, inner = servers["plain"], servers["tls"], servers["inner"]
    digest = hashlib.sha256(b"whatever").hexdigest()
    downgrade = hostile.submit(spec("downgrade", tls.url("downgrade"), digest))
    to_inner = hostile.submit(spec("to-inner", plain.url("to-inner"), digest))
    endless = hostile.submit(spec("endless", plain.url("endless"), digest))
    error_500 = hostile.submit(spec("error-500", plain.url("500"), digest))
    short = hostile.submit(spec("short", plain.url("short"), digest))

    failed_with(hostile, downgrade, "from https:// down to plain http://", "inputs cannot be staged")
    failed_with(hostile, to_inner, "127.0.0.2 resolves to 127.0.0.2, a loopback address", "--allow-input-hosts")
    assert inner.requests == 0, "the internal address was requested"
    failed_with(hostile, endless, "larger than this agent's cap of 1048576 bytes")
    failed_with(hostile, error_500, "the server answered 500")
    failed_with(hostile, short, "10 bytes arrived of the 1000 the server announced")

    began = time.monotonic()
    dripping = hostile.submit(spec("drip", plain.url("drip"), digest))
    failed_with(hostile, dripping, f"took more than {DEADLINE_S} s (--input-deadline)")
    assert time.monotonic() - began < DEADLINE_S + 60, "the dripping download outlived its deadline"

    cancelled = hostile.submit(spec("drip-cancelled", plain.url("drip"), digest))
    deadline = time.monotonic() + 60
    while plain.gets.get("/drip", 0) < 2 and time.monotonic() < deadline:  # its download is under way
        time.sleep(0.2)
    hung_up_before = len(servers["hung_up"])
    asked = time.monotonic()
    assert hostile.cli("cancel", cancelled).returncode == 0
    while len(servers["hung_up"]) == hung_up_before and time.monotonic() < asked + 30:
        time.sleep(0.1)
    assert len(servers["hung_up"]) > hung_up_before, f"the download went on after cancel\n{hostile.cluster.logs()}"
    freed = servers["hung_up"][-1] - asked
    assert freed < 10, f"the cancelled download ended {freed:.1f} s after cancel"
    assert hostile.wait_sweep(cancelled) == "cancelled"

    clean = hostile.submit(spec("clean-url", tls.url("good.bin"), hashlib.sha256(GOOD).hexdigest()))
    assert hostile.wait_sweep(clean, timeout=60) == "completed", (hostile.trials(clean), hostile.cluster.logs())
    hostile.assert_clean_sweep_completes()
