"""Private instances of the real backends, for tests that must kill and restart them.

The shared RabbitMQ and PostgreSQL on the standard ports are used by every
other test (a vhost or a database each); a test that restarts a broker or a
database server, or needs a broker setting that is node-wide, starts its own
here instead: a RabbitMQ node and a PostgreSQL cluster under a temporary
directory, on free loopback ports, plus moto's S3 server. Each can be
``kill9()``-ed and ``start()``-ed again on the same data, which is what a
crash and a restart are.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from waiting import alive


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def _chown(path: Path, user: str) -> None:
    """The servers drop to their own users: they must own their data and reach it."""
    if os.geteuid() != 0:
        return
    subprocess.run(["chown", "-R", f"{user}:{user}", str(path)], check=True)
    for parent in path.resolve().parents:  # temp dirs are 0700: let the server's user through
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate and key (PEM) and the CA that signed it."""

    ca: Path
    cert: Path
    key: Path

    def copied(self, folder: Path) -> TlsFiles:
        """The three files copied into ``folder`` (under a server's root, so its user can read them)."""
        folder.mkdir(parents=True, exist_ok=True)
        for path in (self.ca, self.cert, self.key):
            shutil.copyfile(path, folder / path.name)
        (folder / self.key.name).chmod(0o600)  # PostgreSQL refuses a key others may read
        return TlsFiles(folder / self.ca.name, folder / self.cert.name, folder / self.key.name)


class PrivateRabbit:
    """A RabbitMQ node of our own. ``channel_tick_interval`` is lowered so that
    ``consumer_timeout`` (checked on that tick, once a minute by default) can be
    tested in seconds; ``set_consumer_timeout`` changes it for new channels.
    With ``tls``, it also listens for ``amqps://`` on ``tls_port`` with that
    certificate (clients are not asked for one: ``verify_none``)."""

    def __init__(self, root: Path, tls: TlsFiles | None = None) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.dist_port = free_port(), free_port()
        self.tls_port = free_port() if tls else None
        self.node = f"spotsweep-{uuid.uuid4().hex[:6]}@localhost"
        conf = f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n"
        if tls:
            files = tls.copied(root / "tls")
            conf += (f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\nssl_options.cacertfile = {files.ca}\n"
                     f"ssl_options.certfile = {files.cert}\nssl_options.keyfile = {files.key}\n"
                     "ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n")
        (root / "rabbitmq.conf").write_text(conf)
        (root / "advanced.config").write_text("[{rabbit, [{channel_tick_interval, 1000}]}].\n")
        (root / "enabled_plugins").write_text("[].\n")
        _chown(root, "rabbitmq")
        self.env = {
            **os.environ, "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port), "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"), "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"), "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(root / "pid"),
        }

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def tls_url(self) -> str:
        return f"amqps://guest:guest@127.0.0.1:{self.tls_port}/%2F"

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["rabbitmqctl", "-q", "-n", self.node, *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def start(self, timeout: float = 180) -> None:
        """Start the node and wait until it serves AMQP. A loaded machine can take
        minutes: the wait is long, it says what it waits for, and a node that
        died on the way is started once more; on failure the error carries
        the node's log, so a failed run says why."""
        for attempt in (1, 2):
            proc = subprocess.run(["rabbitmq-server", "-detached"], env=self.env, cwd=self.root, timeout=60,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"rabbitmq-server -detached failed ({proc.returncode}): {proc.stderr[-2000:]}")
            began, deadline = time.monotonic(), time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.ctl("await_startup", "--timeout", "10").returncode == 0:
                    wait_port(self.port)
                    if self.tls_port is not None:
                        wait_port(self.tls_port)
                    return
                pid = self.pid()
                if pid is not None and not alive(pid):
                    break  # it died: start it again, once
                print(f"private RabbitMQ {self.node}: not up after {time.monotonic() - began:.0f} s", file=sys.stderr)
                time.sleep(1)
            if attempt == 1:
                self.kill9()
        raise RuntimeError(f"private RabbitMQ {self.node} did not start within {timeout:.0f} s (twice); "
                           f"its log:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        logs = sorted((self.root / "log").glob("*.log"), key=lambda p: p.stat().st_size, reverse=True)
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs[:2]) or "(no log file)"

    def pid(self) -> int | None:
        try:
            return int((self.root / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill9(self) -> None:
        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and alive(pid):
                time.sleep(0.1)
        (self.root / "pid").unlink(missing_ok=True)

    def set_consumer_timeout(self, ms: int) -> None:
        out = self.ctl("eval", f"application:set_env(rabbit, consumer_timeout, {ms}).")
        if out.returncode != 0:
            raise RuntimeError(out.stderr)

    def stop(self) -> None:
        if self.ctl("stop", timeout=60).returncode != 0:
            self.kill9()


def _pg_bin() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries (pg_ctl) found")
    return versions[-1]


class PrivatePostgres:
    """A PostgreSQL cluster of our own (initdb'd as the postgres user), trust auth;
    with ``tls``, ``ssl=on`` with that certificate (clients choose, by ``sslmode``)."""

    def __init__(self, root: Path, tls: TlsFiles | None = None) -> None:
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.bin = _pg_bin()
        root.mkdir(parents=True, exist_ok=True)
        self.tls = tls.copied(root / "tls") if tls else None
        _chown(root, "postgres")
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def _as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(argv) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check, cwd=self.root)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        if self.tls:
            opts += f" -c ssl=on -c ssl_cert_file={self.tls.cert} -c ssl_key_file={self.tls.key}"
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w",
                          "start")

    def kill9(self) -> None:
        """A crash: ``pg_ctl stop -m immediate`` aborts without a checkpoint, as a power loss would."""
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)

    def stop(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop", check=False)


class MotoS3:
    """moto's S3 server as a separate process on loopback (over HTTPS with ``tls``)."""

    def __init__(self, tls: TlsFiles | None = None) -> None:
        self.port = free_port()
        self.scheme = "https" if tls else "http"
        certs = ["--ssl-cert", str(tls.cert), "--ssl-key", str(tls.key)] if tls else []
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port), *certs],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def env(self, bucket: str) -> dict[str, str]:
        return {"SPOTSWEEP_S3_ENDPOINT": self.endpoint, "SPOTSWEEP_S3_ACCESS_KEY": "testing",
                "SPOTSWEEP_S3_SECRET_KEY": "testing-secret", "SPOTSWEEP_S3_BUCKET": bucket, "SPOTSWEEP_S3_REGION": "us-east-1"}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
