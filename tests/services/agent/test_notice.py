"""Preemption notices: the clouds' metadata answers parsed, and pollers run
against a small fake metadata server on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from metadata import AWS_NOTICE, AZURE_EVENTS, FakeMetadata  # tests/support

from spotsweep.services.agent.notice import MetadataPoller, parse_aws, parse_azure, parse_gcp, watch


def test_parsers_see_a_notice_only_where_the_clouds_put_one() -> None:
    assert parse_aws(404, b"") is None and parse_aws(200, b"not json") is None
    assert parse_aws(200, json.dumps({"action": "reboot"}).encode()) is None
    assert "terminate at 2026-12-02T18:00:00Z" in (parse_aws(200, AWS_NOTICE) or "")
    assert parse_azure(200, json.dumps({"Events": [{"EventType": "Freeze"}]}).encode()) is None
    assert "Preempt" in (parse_azure(200, AZURE_EVENTS) or "")
    assert parse_gcp(200, b"FALSE") is None and parse_gcp(200, b"TRUE\n") is not None


@pytest.fixture()
def metadata() -> Iterator[FakeMetadata]:
    fake = FakeMetadata()
    yield fake
    fake.server.shutdown()


@pytest.mark.parametrize("kind", ["aws", "azure", "gcp"])
def test_the_watcher_drains_once_the_notice_appears(metadata: FakeMetadata, kind: str) -> None:
    notices: list[str] = []
    stop = threading.Event()
    watch(MetadataPoller(kind, metadata.url), notices.append, stop, interval=0.05)
    time.sleep(0.3)
    assert notices == []  # polled, nothing scheduled yet
    metadata.noticed = True
    deadline = time.monotonic() + 5
    while not notices and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    assert len(notices) == 1
    if kind == "aws":  # IMDSv2: a session token first, then the token on every read
        assert metadata.requests[0][:2] == ("PUT", "/latest/api/token")


def test_an_unreachable_endpoint_means_no_notice(caplog: Any) -> None:
    poller = MetadataPoller("aws", "http://127.0.0.1:9", timeout=0.5)  # discard port: refused
    notices: list[str] = []
    stop = threading.Event()
    t = watch(poller, notices.append, stop, interval=0.05)
    time.sleep(0.3)
    stop.set()
    t.join(5)
    assert notices == [] and not t.is_alive()
