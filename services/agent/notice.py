"""Preemption notices: start the drain before the cloud's SIGTERM arrives.

Spot and preemptible VMs announce their end through the instance metadata
service, earlier than (or instead of) a signal to our process:

* AWS: ``/latest/meta-data/spot/instance-action`` answers 404 until an
  interruption is scheduled, then ``{"action": "terminate", "time": ...}``
  about two minutes ahead (IMDSv2: a session token from a PUT first).
* Azure: Scheduled Events, ``/metadata/scheduledevents`` (header
  ``Metadata: true``) lists ``Preempt`` (Spot eviction, at least 30 s ahead)
  and ``Terminate`` events. The list covers every VM of the availability set
  or scale set, so only an event whose ``Resources`` names this VM counts;
  the name is read once from ``/metadata/instance/compute/name`` (if it
  cannot be read, every event counts, with a warning: an early drain costs
  less than a missed one).
* GCP: ``/computeMetadata/v1/instance/preempted`` (header
  ``Metadata-Flavor: Google``) turns ``TRUE`` at preemption, with about 30 s.

``spotsweep agent --preemption-notice aws|azure|gcp`` polls one of these and
drains exactly as on SIGTERM; ``signal`` (the default) relies on the signal
alone. Parsing is pure (``parse_*``), the HTTP is stdlib ``urllib`` (one GET
every few seconds needs no client library) without any proxy (the metadata
service is link-local: ``HTTP_PROXY`` must not capture it), and an
unreachable endpoint only means "no notice" so an agent off the cloud keeps
working. No error ends the watch: it is logged and the next poll goes on.
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


def parse_azure(status: int, body: bytes, vm_name: str | None = None) -> str | None:
    """Azure Scheduled Events -> the first Preempt/Terminate event for this VM, or None.

    ``vm_name`` is this VM's name (IMDS ``compute/name``): an event counts only
    if its ``Resources`` list names it. None (the name is unknown) counts every event.
    """
    events = (_document(status, body) or {}).get("Events", [])
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict) or event.get("EventType") not in AZURE_EVENTS:
            continue
        resources = event.get("Resources")
        names = {str(r).casefold() for r in resources} if isinstance(resources, list) else set()
        if vm_name is not None and vm_name.casefold() not in names:
            continue  # another VM of the set is going away, not this one
        return f"Azure scheduled event: {event['EventType']} not before {event.get('NotBefore') or 'now'}"
    return None


def parse_gcp(status: int, body: bytes) -> str | None:
    """GCP's ``instance/preempted`` -> a reason once it reads TRUE, or None."""
    if status == 200 and body.strip().upper() == b"TRUE":
        return "GCP preemption: instance/preempted is TRUE"
    return None


# The metadata service is link-local: never through HTTP(S)_PROXY, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
AZURE_NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"


def _request(url: str, headers: dict[str, str], method: str = "GET", timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers, method=method)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
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
    _vm_name: str | None = field(default=None, repr=False)  # Azure: this VM's name; None: unknown
    _named: bool = field(default=False, repr=False)  # Azure: the name was looked up (once)

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
            if not self._named:
                self._vm_name = self._azure_name(base)
                self._named = True
            status, body = _request(f"{base}/metadata/scheduledevents?api-version=2020-07-01", {"Metadata": "true"},
                                    timeout=self.timeout)
            return parse_azure(status, body, self._vm_name)
        if self.kind == "gcp":
            return parse_gcp(*_request(f"{base}/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"},
                                       timeout=self.timeout))
        raise ValueError(f"unknown preemption notice kind {self.kind!r}")

    def _azure_name(self, base: str) -> str | None:
        """This VM's name from IMDS, to pick its own events out of the set's; None if unknown."""
        try:
            status, body = _request(f"{base}{AZURE_NAME_PATH}", {"Metadata": "true"}, timeout=self.timeout)
            name = body.decode().strip() if status == 200 else ""
            why = f"HTTP {status}" if status != 200 else "an empty answer"
        except Exception as e:  # noqa: BLE001 - unreachable, refused, garbled: fall back, never fail
            name, why = "", f"{type(e).__name__}: {e}"
        if name:
            return name
        _log.warning("cannot read this VM's name from the metadata service: every Azure Preempt/Terminate event will "
                     "drain this agent, including other VMs' in the same set", url=f"{base}{AZURE_NAME_PATH}", error=why)
        return None


def watch(poller: MetadataPoller, on_notice: Callable[[str], None], stop: threading.Event, interval: float = 5.0) -> threading.Thread:
    """Poll in a daemon thread until a notice (then call ``on_notice`` once) or ``stop``."""

    def loop() -> None:
        last_error = ""  # each different error is logged once, not on every poll
        while not stop.is_set():
            try:
                reason = poller.check()
            except Exception as e:  # noqa: BLE001 - unreachable, refused, timed out, a garbled answer: no notice
                error = f"{type(e).__name__}: {e}"
                if error != last_error:
                    _log.warning("preemption notice endpoint failed; still polling, and SIGTERM still drains",
                                 kind=poller.kind, url=poller.base_url, error=error)
                    last_error = error
                reason = None
            if reason is not None:
                _log.warning("preemption notice: draining", reason=reason)
                on_notice(reason)
                return
            stop.wait(interval)

    thread = threading.Thread(target=loop, name=f"preemption-notice-{poller.kind}", daemon=True)
    thread.start()
    return thread
