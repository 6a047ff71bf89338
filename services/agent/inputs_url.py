"""A URL input (``from: https://host/path/file.tar``): one file, named and checked before it enters the cache.

Its *version* (the cache key, :func:`version_of`) is the spec's ``sha256``
when it gives one (the content itself, wherever it is served from), else the
URL with the server's ``ETag``, ``Last-Modified`` and ``Content-Length``: a
changed file is a new version. A server that sends neither ETag nor
Last-Modified cannot say whether the file changed, so such a URL needs
``sha256``. :func:`save` streams the body to ``<tree>/<file name>``, checks its
length against ``Content-Length`` and its digest against ``sha256``. With
``sha256`` a node that holds the file asks the server nothing; without it one
GET serves both: its headers name the version, and its body is read only
when the node does not hold that version yet (so a presigned URL signed for
GET only works too).

Every hop is judged by :mod:`.url_policy` before its request is sent:
redirects are followed here, one at a time (at most ``MAX_HOPS``, never in a
loop), not by ``urllib``, which follows them to any scheme and host and
resolves each name itself. The host is resolved once, every address it
resolves to is judged, and the connection is made to the judged address
(:class:`_Pinned`, :class:`_PinnedTLS`) while the request's Host header and
TLS's SNI and certificate check use the URL's host name: no second lookup
for a rebinding DNS server to answer differently. No library in the
agent's environment does that (urllib3 and requests resolve at connect
time; their ``server_hostname`` needs the same hand-made pinning), so it is
these few lines over ``http.client``. No proxy is used: one would resolve
the name where the policy cannot judge it.

While it runs, a :class:`_Watch` thread ends the download (it shuts the
socket down, which wakes a blocked read) past its deadline, under its
throughput floor, or when the run is stopped, cancelled or lost
(:class:`Guard`); the size cap is checked at every read. What the server
does wrong (an error status, a refused hop, a short or oversized body, a
digest that does not match, a server that cannot be reached) is the input's
fault: a :class:`PermanentError` naming the status, never a loss of the
agent. Only the agent's own disk failing (a write's ``OSError``) is the
agent's.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from email.message import Message
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.url_policy import IP, MAX_HOPS, Budget, Policy, hop_refusal, over_cap, refused_addresses
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import Input, url_file_name

TIMEOUT_S = 30.0  # to connect, and the longest wait for one read
CHUNK = 1 << 20
POLL_S = 0.25  # how often the watch looks at the clock and the run's controls
REDIRECTS = frozenset({301, 302, 303, 307, 308})


def version_of(item: Input, headers: Message | None) -> str:
    """The version of ``item`` as served with ``headers`` (see the module's docstring; none needed with ``sha256``)."""
    name = url_file_name(item.source)
    key: list[str | None]
    if item.sha256 is not None:
        key = ["sha256", item.sha256, name]
    else:
        if headers is None:
            raise ValueError("a URL input without sha256 is versioned by the server's headers")
        etag, modified = headers.get("ETag"), headers.get("Last-Modified")
        if etag is None and modified is None:
            raise PermanentError(f"input {item.source}: the server sends neither ETag nor Last-Modified, so a changed "
                                 "file could not be told from the cached one; give the file's sha256 in the spec")
        key = [item.source, etag, modified, headers.get("Content-Length")]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


class Aborted(Exception):
    """The run ended while its input was downloading: ``reason`` is ``lost``, ``stopped`` or ``cancelled``."""

    def __init__(self, reason: str, source: str) -> None:
        super().__init__(f"input {source}: its download was abandoned: the run was {reason} while it was staged")
        self.reason = reason


@dataclass(frozen=True)
class Guard:
    """What a download obeys: the operator's :class:`Policy`, and ``halted``, the run's reason to stop (None: go on)."""

    policy: Policy = field(default_factory=Policy)
    halted: Callable[[], str | None] = lambda: None

    @classmethod
    def for_run(cls, policy: Policy, control: RunControls, run_id: str) -> Guard:
        """The guard of run ``run_id``: a lost delivery or a hard stop, the planner's stop, a cancelled sweep."""
        def halted() -> str | None:
            now = control.signals(run_id)
            return "lost" if now.kill or now.lost else "stopped" if now.stop else "cancelled" if now.cancelled else None
        return cls(policy, halted)


def _dial(ip: IP, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to ``ip`` itself (no lookup: ``socket.create_connection`` would resolve again)."""
    sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((str(ip), port))
    except BaseException:
        sock.close()
        raise
    return sock


class _Pinned(HTTPConnection):
    """A connection to the address that was judged; the Host header is the URL's host name."""

    def __init__(self, host: str, port: int, ip: IP) -> None:
        super().__init__(host, port, timeout=TIMEOUT_S)
        self.ip = ip

    def connect(self) -> None:
        self.sock = _dial(self.ip, self.port, self.timeout)


class _PinnedTLS(HTTPSConnection):
    """As :class:`_Pinned`, over TLS: SNI and the certificate's check are for the URL's host name."""

    def __init__(self, host: str, port: int, ip: IP, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=TIMEOUT_S, context=context)
        self.ip, self.tls = ip, context

    def connect(self) -> None:
        raw = _dial(self.ip, self.port, self.timeout)
        try:
            self.sock = self.tls.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise


class Download:
    """One GET of a URL input, hop by hop (:meth:`start`), read by :meth:`chunks`; watched until :meth:`close`."""

    def __init__(self, item: Input, guard: Guard) -> None:
        self.item, self.guard, self.received = item, guard, 0
        self.conn: HTTPConnection | None = None
        self.response: HTTPResponse | None = None
        self.ended: tuple[str, str] | None = None  # (halted | limit, why), set by the watch
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._watching, name="input-watch", daemon=True)

    @property
    def headers(self) -> Message:
        assert self.response is not None, "started"
        return self.response.headers

    def start(self) -> None:
        """Request the URL, following at most MAX_HOPS redirects, each hop judged before it is requested."""
        self._watch.start()
        url, previous, seen = self.item.source, None, set()
        for _ in range(MAX_HOPS + 1):
            why = "a redirect loop" if url in seen else hop_refusal(url, previous, self.item.sha256)
            if why is not None:
                raise self._refused(url, why)
            seen.add(url)
            response = self._get(url)
            if response.status not in REDIRECTS:
                if response.status != 200:
                    raise self._refused(url, f"the server answered {response.status} {response.reason}")
                self.response = response
                return
            location = response.getheader("Location")
            self._close_conn()
            if not location:
                raise self._refused(url, f"the server answered {response.status} without a Location")
            previous, url = url, urljoin(url, location)
        raise self._refused(url, f"more than {MAX_HOPS} redirects")

    def chunks(self) -> Iterator[bytes]:
        """The body, chunk by chunk, within the size cap; raises PermanentError when it breaks off or is cut."""
        assert self.response is not None, "started"
        announced = self.response.getheader("Content-Length", "")
        if announced.isdigit() and (why := over_cap(int(announced), self.guard.policy)) is not None:
            raise self._refused(self.item.source, f"{why}; the server announced {announced}")
        while True:
            try:
                chunk = self.response.read1(CHUNK)
            except (OSError, HTTPException) as e:
                raise self._refused(self.item.source, f"the download broke off after {self.received} bytes: "
                                                      f"{e or type(e).__name__}") from e
            if self.ended is not None or not chunk:
                self._check()
                return
            self.received += len(chunk)
            if (why := over_cap(self.received, self.guard.policy)) is not None:
                raise self._refused(self.item.source, f"{why}; stopped after {self.received} bytes")
            yield chunk

    def close(self) -> None:
        self._done.set()
        self._close_conn()

    def _get(self, url: str) -> HTTPResponse:
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
            addresses = [ipaddress.ip_address(str(a[4][0]).split("%")[0])
                         for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        except (OSError, ValueError) as e:
            raise self._refused(url, f"its host cannot be resolved: {e}") from e
        if (why := refused_addresses(host, addresses, self.guard.policy)) is not None:
            raise self._refused(url, why)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for i, ip in enumerate(addresses):
            self._check()
            self.conn = (_PinnedTLS(host, port, ip, ssl.create_default_context()) if parts.scheme.lower() == "https"
                         else _Pinned(host, port, ip))
            try:
                self.conn.request("GET", path, headers={"Accept-Encoding": "identity", "User-Agent": "spotsweep"})
                return self.conn.getresponse()
            except (OSError, HTTPException) as e:
                self._close_conn()
                if i == len(addresses) - 1:
                    raise self._refused(url, f"{type(e).__name__}: {e}") from e
        raise self._refused(url, "its host resolves to no address")

    def _watching(self) -> None:
        budget = Budget(self.guard.policy, time.monotonic())
        while not self._done.wait(POLL_S):
            halted = self.guard.halted()
            why = budget.check(time.monotonic(), self.received) if halted is None else None
            if halted is not None or why is not None:
                self.ended = ("halted", halted) if halted is not None else ("limit", str(why))
                sock = self.conn.sock if self.conn is not None else None
                if sock is not None:
                    with suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # wakes a blocked read (TLS too)
                return

    def _check(self) -> None:
        """Raise what the watch decided, if it did."""
        if self.ended is not None:
            kind, why = self.ended
            if kind == "halted":
                raise Aborted(why, self.item.source)
            raise PermanentError(f"input {self.item.source}: refused: {why}")

    def _refused(self, url: str, why: str) -> Exception:
        """The error of a hop or a body gone wrong (what the watch decided comes first)."""
        try:
            self._check()
        except (Aborted, PermanentError) as e:
            return e
        hop = "" if url == self.item.source else f" (redirected to {url})"
        return PermanentError(f"input {self.item.source}{hop}: refused: {why}")

    def _close_conn(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


@contextmanager
def opened(item: Input, guard: Guard | None = None) -> Iterator[Download]:
    """The GET's response (headers read, body not), after every hop was judged; closed after the block."""
    download = Download(item, guard or Guard())
    try:
        download.start()
        yield download
    finally:
        download.close()


def fetch(item: Input, tree: Path, guard: Guard | None = None) -> None:
    """GET ``item`` into ``tree`` (:func:`save`)."""
    with opened(item, guard) as download:
        save(item, download, tree)


def save(item: Input, download: Download, tree: Path) -> None:
    """The body into ``tree/<file name>``, its length and digest checked (a failed write is the agent's OSError)."""
    path, digest = tree / url_file_name(item.source), hashlib.sha256()
    with path.open("wb") as out:
        for chunk in download.chunks():
            out.write(chunk)
            digest.update(chunk)
    expected, size = download.headers.get("Content-Length"), download.received
    if expected is not None and expected.isdigit() and int(expected) != size:
        raise PermanentError(f"input {item.source}: refused: {size} bytes arrived of the {expected} the server "
                             "announced")
    if item.sha256 is not None and digest.hexdigest() != item.sha256:
        raise PermanentError(f"input {item.source}: the file's sha256 is {digest.hexdigest()}, not the spec's "
                             f"{item.sha256}")
