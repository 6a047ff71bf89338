"""A fake cloud instance-metadata server on loopback, answering like AWS, Azure and GCP.

Until ``noticed`` is set it says "nothing scheduled"; then each cloud's
endpoint announces a preemption, as the real services do ahead of taking a
spot VM back. Azure's Scheduled Events name the VMs they affect
(``azure_resources``, by default this VM, ``vm_name``, which the instance
endpoint reports unless ``serves_name`` is off); ``garbled`` makes every
answer a broken HTTP response.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AWS_NOTICE = json.dumps({"action": "terminate", "time": "2026-12-02T18:00:00Z"}).encode()
VM_NAME = "spot-vm-7"
AZURE_NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"


def azure_events(resources: list[str]) -> bytes:
    """Scheduled Events as Azure lists them: a Freeze of this VM, and a Preempt of ``resources``."""
    return json.dumps({"DocumentIncarnation": 2, "Events": [
        {"EventId": "1", "EventType": "Freeze", "EventStatus": "Scheduled", "NotBefore": "", "Resources": [VM_NAME],
         "ResourceType": "VirtualMachine"},
        {"EventId": "2", "EventType": "Preempt", "EventStatus": "Scheduled", "NotBefore": "Mon, 02 Dec 2026 18:00:30 GMT",
         "Resources": resources, "ResourceType": "VirtualMachine"},
    ]}).encode()


AZURE_EVENTS = azure_events([VM_NAME])


class FakeMetadata:
    """Answers like the three clouds; ``noticed`` flips them to "going away"."""

    def __init__(self) -> None:
        self.noticed = False
        self.vm_name = VM_NAME
        self.serves_name = True
        self.azure_resources = [VM_NAME]
        self.garbled = False
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
                if outer.garbled:
                    self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
                    self.close_connection = True
                    return None
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") != "tok-123":
                        return self.reply(401)
                    return self.reply(200, AWS_NOTICE) if outer.noticed else self.reply(404)
                if self.path.startswith("/metadata/scheduledevents") and self.headers.get("Metadata") == "true":
                    return self.reply(200, azure_events(outer.azure_resources) if outer.noticed else b'{"Events": []}')
                if self.path == AZURE_NAME_PATH and self.headers.get("Metadata") == "true" and outer.serves_name:
                    return self.reply(200, outer.vm_name.encode())
                if self.path == "/computeMetadata/v1/instance/preempted" and self.headers.get("Metadata-Flavor") == "Google":
                    return self.reply(200, b"TRUE" if outer.noticed else b"FALSE")
                self.reply(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
