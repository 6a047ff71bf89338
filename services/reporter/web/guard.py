"""Who may read the dashboard, and how much of it at once (docs/dashboard.md, "Who
may read it" and "Limits"): :func:`exposure` decides whether it may start where
it listens (anyone who reaches the port reads every sweep's params, logs and
checkpoint names); :class:`TokenGate` asks for the token, as a bearer header or
the cookie the login form sets (an HMAC of the token, never the token);
:class:`Admission` answers 503 past ``limit`` requests at once, rather than
keeping a queue that grows with the clients.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.types import ASGIApp, Receive, Scope, Send

from spotsweep.shared.errors import PermanentError

COOKIE = "spotsweep_dashboard"
OPEN = ("/healthz", "/readyz", "/static/")  # the kubelet's probes and the vendored scripts: no token
LOGIN_BODY = 4096  # bytes a login form may send


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def exposure(host: str, token: str | None, insecure: bool) -> str | None:
    """None when the dashboard may start quietly on ``host``; the warning to log
    when it starts insecure; raises :class:`PermanentError` naming the setting when
    it must not start."""
    if token or is_loopback(host):
        return None
    if insecure:
        return (f"the dashboard listens on {host} without a token (--insecure): anyone who reaches this port reads "
                "every sweep's params, logs and checkpoints; set SPOTSWEEP_DASHBOARD_TOKEN")
    raise PermanentError(f"the dashboard would listen on {host} without a token: set SPOTSWEEP_DASHBOARD_TOKEN "
                         "(or SPOTSWEEP_DASHBOARD_TOKEN_FILE), listen on 127.0.0.1, or pass --insecure")


def _safe_next(target: str) -> str:
    """Where a login goes back to: a path of this site only (no ``//host`` or ``\\`` tricks)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) and len(target) < 2000 else "/"


async def _send(send: Send, status: int, body: bytes, content_type: str, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *headers]})
    await send({"type": "http.response.body", "body": body})


class TokenGate:
    """Every request but :data:`OPEN`'s carries the token (see the module's docstring);
    ``login_page(next, error)`` renders the form."""

    def __init__(self, app: ASGIApp, token: str, login_page: Any) -> None:
        self.app, self.token, self.login_page = app, token.encode(), login_page
        self.cookie = hmac.new(token.encode(), b"spotsweep dashboard cookie", hashlib.sha256).hexdigest().encode()

    def _allowed(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers") or [])
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
            return True
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed Cookie header is no cookie
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.cookie)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(OPEN):
            return await self.app(scope, receive, send)
        if scope["path"] == "/login" and scope["method"] == "POST":
            return await self._login(scope, receive, send)
        if self._allowed(scope):
            if scope["path"] == "/login":  # logged in already
                return await _send(send, 303, b"", "text/plain", [(b"location", b"/")])
            return await self.app(scope, receive, send)
        challenge = (b"www-authenticate", b'Bearer realm="spotsweep"')
        if scope["path"].startswith("/api/") or scope["path"] == "/metrics":
            return await _send(send, 401, b'{"error": "give the dashboard\'s token: Authorization: Bearer TOKEN"}',
                               "application/json", [challenge])
        here = scope["path"] + ("?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else "")
        target = here if scope["path"] != "/login" else "/"
        await _send(send, 401, self.login_page(target, None).encode(), "text/html; charset=utf-8", [challenge])

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > LOGIN_BODY:
                return await _send(send, 413, b"login form too large", "text/plain", [])
            if not message.get("more_body"):
                break
        form = parse_qs(body.decode("utf-8", "replace"))
        target = _safe_next((form.get("next") or ["/"])[0])
        if not hmac.compare_digest((form.get("token") or [""])[0].encode(), self.token):
            page = self.login_page(target, "Wrong token: try again.")
            return await _send(send, 401, page.encode(), "text/html; charset=utf-8", [])
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = f"{COOKIE}={self.cookie.decode()}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await _send(send, 303, b"", "text/plain", [(b"location", quote(target, safe="/?=&%#:;,+-_.~").encode()),
                                                   (b"set-cookie", cookie.encode())])


class Admission:
    """At most ``limit`` requests in the app at once (:data:`OPEN`'s aside); the rest 503 at once."""

    def __init__(self, app: ASGIApp, limit: int, retry_after: int = 2) -> None:
        self.app, self.limit, self.retry_after, self.active = app, limit, retry_after, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(OPEN):
            return await self.app(scope, receive, send)
        if self.active >= self.limit:  # one event loop: no lock needed
            return await _send(send, 503, b'{"error": "the dashboard is busy; try again in a moment"}',
                               "application/json", [(b"retry-after", str(self.retry_after).encode())])
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
