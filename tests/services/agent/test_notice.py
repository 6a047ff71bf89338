"""Preemption notices: the clouds' metadata answers parsed, and pollers run
against a small fake metadata server on loopback: Azure drains only for an
event naming this VM, metadata requests never go through a proxy, and no
error stops the watch."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from metadata import AWS_NOTICE, AZURE_EVENTS, AZURE_NAME_PATH, VM_NAME, FakeMetadata, azure_events  # tests/support

from waiting import wait_until
from spotsweep.services.agent.notice import MetadataPoller, parse_aws, parse_azure, parse_gcp, watch


def test_parsers_see_a_notice_only_where_the_clouds_put_one() -> None:
    assert parse_aws(404, b"") is None and parse_aws(200, b"not json") is None
    assert parse_aws(200, json.dumps({"action": "reboot"}).encode()) is None
    assert "terminate at 2026-12-02T18:00:00Z" in (parse_aws(200, AWS_NOTICE) or "")
    assert parse_azure(200, json.dumps({"Events": [{"EventType": "Freeze"}]}).encode()) is None
    assert "Preempt" in (parse_azure(200, AZURE_EVENTS) or "")
    assert "Preempt" in (parse_azure(200, AZURE_EVENTS, VM_NAME.upper()) or "")  # Azure names ignore case
    assert parse_azure(200, azure_events(["other-vm"]), VM_NAME) is None  # another VM of the set is evicted
    assert parse_azure(200, azure_events(["other-vm"])) is not None  # our name unknown: every event counts
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
    assert wait_until(lambda: len(metadata.requests) >= 3)  # polled several times...
    assert notices == []  # ...and nothing scheduled yet
    metadata.noticed = True
    wait_until(lambda: bool(notices))
    stop.set()
    assert len(notices) == 1
    if kind == "aws":  # IMDSv2: a session token first, then the token on every read
        assert metadata.requests[0][:2] == ("PUT", "/latest/api/token")


class CountingPoller(MetadataPoller):
    checks = 0

    def check(self) -> str | None:
        try:
            return super().check()
        finally:
            self.checks += 1


def test_an_unreachable_endpoint_means_no_notice(caplog: Any) -> None:
    poller = CountingPoller("aws", "http://127.0.0.1:9", timeout=0.5)  # discard port: refused
    notices: list[str] = []
    stop = threading.Event()
    t = watch(poller, notices.append, stop, interval=0.05)
    assert wait_until(lambda: poller.checks >= 3)  # failed polls, and the watch goes on
    stop.set()
    t.join(5)
    assert notices == [] and not t.is_alive()


def polls(metadata: FakeMetadata, prefix: str) -> int:
    return sum(1 for _, path, _ in list(metadata.requests) if path.startswith(prefix))


def test_azure_drains_only_for_an_eviction_that_names_this_vm(metadata: FakeMetadata) -> None:
    metadata.azure_resources = ["spot-vm-3"]  # a neighbour in the scale set is being evicted
    metadata.noticed = True
    notices: list[str] = []
    stop = threading.Event()
    watch(MetadataPoller("azure", metadata.url), notices.append, stop, interval=0.05)
    try:
        assert wait_until(lambda: polls(metadata, "/metadata/scheduledevents") >= 5)
        assert notices == []
        metadata.azure_resources = ["spot-vm-3", VM_NAME]
        assert wait_until(lambda: len(notices) == 1)
    finally:
        stop.set()
    assert polls(metadata, AZURE_NAME_PATH) == 1  # the name is read once


def test_azure_without_a_readable_vm_name_drains_on_any_eviction(metadata: FakeMetadata) -> None:
    metadata.serves_name = False
    metadata.azure_resources = ["spot-vm-3"]
    metadata.noticed = True
    notices: list[str] = []
    stop = threading.Event()
    watch(MetadataPoller("azure", metadata.url), notices.append, stop, interval=0.05)
    try:
        assert wait_until(lambda: len(notices) == 1)  # an early drain costs less than a missed one
    finally:
        stop.set()


def test_metadata_requests_never_go_through_a_proxy(metadata: FakeMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # a proxy that refuses everything
    urllib.request.install_opener(None)  # urllib's own default opener reads the proxies on its next use
    metadata.noticed = True
    assert "terminate" in (MetadataPoller("aws", metadata.url).check() or "")
    assert "Preempt" in (MetadataPoller("azure", metadata.url).check() or "")


def test_a_garbled_answer_does_not_end_the_watch(metadata: FakeMetadata) -> None:
    metadata.garbled = True  # http.client raises BadStatusLine: not an OSError
    metadata.noticed = True
    notices: list[str] = []
    stop = threading.Event()
    thread = watch(MetadataPoller("gcp", metadata.url), notices.append, stop, interval=0.05)
    try:
        assert wait_until(lambda: len(metadata.requests) >= 3)
        assert thread.is_alive() and notices == []
        metadata.garbled = False
        assert wait_until(lambda: len(notices) == 1)
    finally:
        stop.set()
