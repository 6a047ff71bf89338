"""Local HTTP(S) servers for URL-input tests: a folder, or hostile routes (a redirect, an endless or dripping body,
an error status, a short body), each counting the requests it got."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


def self_signed(folder: Path) -> Path:
    """A certificate (and its key, in one PEM file) for localhost and 127.0.0.1; also the CA file clients trust."""
    pem = folder / "server.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    pem.write_bytes((folder / "cert.pem").read_bytes() + (folder / "key.pem").read_bytes())
    return pem


class Server:
    """Serves ``root`` (when given) and ``routes`` on ``host``; ``gets`` counts the requests of each path."""

    def __init__(self, root: Path | None = None, routes: dict[str, Route] | None = None, host: str = "127.0.0.1",
                 pem: Path | None = None, port: int = 0) -> None:
        gets: dict[str, int] = {}
        self.gets, self.routes, self.scheme = gets, routes if routes is not None else {}, "https" if pem else "http"
        table = self.routes

        class Handler(http.server.SimpleHTTPRequestHandler):  # sends Last-Modified and Content-Length
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root or "/nonexistent"), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                gets[self.path] = gets.get(self.path, 0) + 1
                route = table.get(self.path)
                if route is not None:
                    route(self)
                else:
                    super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        if pem is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(pem)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}/{path}"

    @property
    def requests(self) -> int:
        return sum(self.gets.values())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def redirect(to: str, status: int = 302) -> Route:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Location", to)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return route


def status(code: int) -> Route:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_error(code)
    return route


def body(length: int | None, chunk: bytes = b"x" * 65536, every: float = 0.0, announced: int | None = None,
         hung_up: list[float] | None = None) -> Route:
    """``length`` bytes (None: without end), a chunk every ``every`` s; ``announced``: the Content-Length sent;
    ``hung_up`` gets the time (monotonic) the client hung up."""
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("ETag", '"e"')
        if announced is not None:
            h.send_header("Content-Length", str(announced))
        h.end_headers()
        sent = 0
        try:
            while length is None or sent < length:
                part = chunk if length is None else chunk[:length - sent]
                h.wfile.write(part)
                h.wfile.flush()
                sent += len(part)
                if every:
                    time.sleep(every)
        except OSError:  # the client hung up
            if hung_up is not None:
                hung_up.append(time.monotonic())
        h.close_connection = True
    return route
