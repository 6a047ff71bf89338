"""Preemption notices: start the drain before the cloud's SIGTERM arrives.

Spot and preemptible VMs announce their end through the instance metadata
service, earlier than (or instead of) a signal to our process:

* AWS: ``/latest/meta-data/spot/instance-action`` answers 404 until an
  interruption is scheduled, then ``{"action": "terminate", "time": ...}``
  about two minutes ahead (IMDSv2: a session token from a PUT first).
* Azure: Scheduled Events, ``/metadata/scheduledevents`` (header
  ``Metadata: true``) lists ``Preempt`` (Spot eviction, at least 30 s ahead)
  and ``Terminate`` events.
* GCP: ``/computeMetadata/v1/instance/preempted`` (header
  ``Metadata-Flavor: Google``) turns ``TRUE`` at preemption, with about 30 s.

``spotsweep agent --preemption-notice aws|azure|gcp`` polls one of these and
drains exactly as on SIGTERM; ``signal`` (the default) relies on the signal
alone. Parsing is pure (``parse_*``), the HTTP is stdlib ``urllib`` (one GET
every few seconds needs no client library), and an unreachable endpoint only
means "no notice" so an agent off the cloud keeps working.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from spotsweep.shared import log

_log = log.get("spotsweep.agent")

NOTICE_KINDS = ("signal", "aws", "azure", "gcp")
DEFAULT_URLS = {"aws": "http://169.254.169.254", "azure": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}
AWS_ACTIONS = ("terminate", "stop", "hibernate")
AZURE_EVENTS = ("Preempt", "Terminate")


def _document(status: int, body: bytes) -> dict[str, object] | None:
    """A 200 answer's JSON object; None for anything else (no notice)."""
    if status != 200:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def parse_aws(status: int, body: bytes) -> str | None:
    """The AWS spot ``instance-action`` document -> why we are going away, or None."""
    doc = _document(status, body) or {}
    action = doc.get("action")
    if action not in AWS_ACTIONS:
        return None
    return f"AWS spot interruption notice: {action} at {doc.get('time', '?')}"


def parse_azure(status: int, body: bytes) -> str | None:
    """Azure Scheduled Events -> the first Preempt/Terminate event, or None."""
    events = (_document(status, body) or {}).get("Events", [])
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("EventType") in AZURE_EVENTS:
            return f"Azure scheduled event: {event['EventType']} not before {event.get('NotBefore') or 'now'}"
    return None


def parse_gcp(status: int, body: bytes) -> str | None:
    """GCP's ``instance/preempted`` -> a reason once it reads TRUE, or None."""
    if status == 200 and body.strip().upper() == b"TRUE":
        return "GCP preemption: instance/preempted is TRUE"
    return None


def _request(url: str, headers: dict[str, str], method: str = "GET", timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a fixed metadata URL
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


@dataclass
class MetadataPoller:
    """One check of one cloud's metadata endpoint per :meth:`check`."""

    kind: str
    base_url: str
    timeout: float = 2.0
    _token: str | None = field(default=None, repr=False)

    def check(self) -> str | None:
        """The notice's reason, or None (also when the endpoint cannot be reached)."""
        base = self.base_url.rstrip("/")
        if self.kind == "aws":
            if self._token is None:
                status, body = _request(f"{base}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
                                        "PUT", self.timeout)
                self._token = body.decode() if status == 200 else ""  # "": IMDSv1 only
            headers = {"X-aws-ec2-metadata-token": self._token} if self._token else {}
            status, body = _request(f"{base}/latest/meta-data/spot/instance-action", headers, timeout=self.timeout)
            if status == 401:
                self._token = None  # the token expired: get a new one next time
            return parse_aws(status, body)
        if self.kind == "azure":
            return parse_azure(*_request(f"{base}/metadata/scheduledevents?api-version=2020-07-01", {"Metadata": "true"},
                                         timeout=self.timeout))
        if self.kind == "gcp":
            return parse_gcp(*_request(f"{base}/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"},
                                       timeout=self.timeout))
        raise ValueError(f"unknown preemption notice kind {self.kind!r}")


def watch(poller: MetadataPoller, on_notice: Callable[[str], None], stop: threading.Event, interval: float = 5.0) -> threading.Thread:
    """Poll in a daemon thread until a notice (then call ``on_notice`` once) or ``stop``."""

    def loop() -> None:
        warned = False
        while not stop.is_set():
            try:
                reason = poller.check()
            except (OSError, ValueError) as e:  # unreachable, refused, timed out: no notice
                if not warned:
                    _log.warning("preemption notice endpoint unreachable; relying on SIGTERM", kind=poller.kind,
                                 url=poller.base_url, error=str(e))
                    warned = True
                reason = None
            if reason is not None:
                _log.warning("preemption notice: draining", reason=reason)
                on_notice(reason)
                return
            stop.wait(interval)

    thread = threading.Thread(target=loop, name=f"preemption-notice-{poller.kind}", daemon=True)
    thread.start()
    return thread
