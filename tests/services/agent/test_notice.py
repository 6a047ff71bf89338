"""Preemption notices: the clouds' metadata answers parsed, and pollers run
against a small fake metadata server on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from spotsweep.services.agent.notice import MetadataPoller, parse_aws, parse_azure, parse_gcp, watch

AWS_NOTICE = json.dumps({"action": "terminate", "time": "2026-12-02T18:00:00Z"}).encode()
AZURE_EVENTS = json.dumps({"DocumentIncarnation": 2, "Events": [
    {"EventId": "1", "EventType": "Freeze", "EventStatus": "Scheduled", "NotBefore": ""},
    {"EventId": "2", "EventType": "Preempt", "EventStatus": "Scheduled", "NotBefore": "Mon, 02 Dec 2026 18:00:30 GMT"},
]}).encode()


def test_parsers_see_a_notice_only_where_the_clouds_put_one() -> None:
    assert parse_aws(404, b"") is None and parse_aws(200, b"not json") is None
    assert parse_aws(200, json.dumps({"action": "reboot"}).encode()) is None
    assert "terminate at 2026-12-02T18:00:00Z" in (parse_aws(200, AWS_NOTICE) or "")
    assert parse_azure(200, json.dumps({"Events": [{"EventType": "Freeze"}]}).encode()) is None
    assert "Preempt" in (parse_azure(200, AZURE_EVENTS) or "")
    assert parse_gcp(200, b"FALSE") is None and parse_gcp(200, b"TRUE\n") is not None


class FakeMetadata:
    """Answers like the three clouds; ``noticed`` flips them to "going away"."""

    def __init__(self) -> None:
        self.noticed = False
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                outer.requests.append(("PUT", self.path, dict(self.headers)))
                self.reply(200, b"tok-123") if self.path == "/latest/api/token" else self.reply(404)

            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(("GET", self.path, dict(self.headers)))
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") != "tok-123":
                        return self.reply(401)
                    return self.reply(200, AWS_NOTICE) if outer.noticed else self.reply(404)
                if self.path.startswith("/metadata/scheduledevents") and self.headers.get("Metadata") == "true":
                    return self.reply(200, AZURE_EVENTS if outer.noticed else b'{"Events": []}')
                if self.path == "/computeMetadata/v1/instance/preempted" and self.headers.get("Metadata-Flavor") == "Google":
                    return self.reply(200, b"TRUE" if outer.noticed else b"FALSE")
                self.reply(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


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
