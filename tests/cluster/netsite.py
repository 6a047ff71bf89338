"""A site of several hosts on a real (virtual) network, for the multi-host tests.

:func:`open_site` builds, in network namespaces of its own (tests/support/netns.py):
a servers host running a private RabbitMQ node, a private PostgreSQL cluster
and moto's S3 server, all listening on that host's address, and hosts for the other services (:meth:`Site.host`), which the test
starts with :meth:`NetCluster.start_on`. The test process reads the database and runs
``rabbitmqctl`` from inside the servers' host (:meth:`Site.on_servers`).
Everything (processes, servers, namespaces) is removed afterwards, also when
the test fails; where namespaces cannot be made it raises NetnsUnavailable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from cluster import Cluster
from netns import Host, Network
from servers import PrivatePostgres, PrivateRabbit, free_port

HEARTBEAT = 4  # seconds (SPOTSWEEP_HEARTBEAT): RabbitMQ drops a silent peer after ~2-3x this, pika after ~hb+5 to 2(hb+5)


class NetRabbit(PrivateRabbit):
    """A private node that also listens on ``address`` (same port), for the other hosts."""

    def __init__(self, root: Path, address: str) -> None:
        super().__init__(root)
        self.address = address
        with (root / "rabbitmq.conf").open("a") as conf:
            conf.write(f"listeners.tcp.net = {address}:{self.port}\n")

    @property
    def net_url(self) -> str:
        return f"amqp://guest:guest@{self.address}:{self.port}/%2F"


class NetPostgres(PrivatePostgres):
    """A private cluster that also listens on ``address`` and trusts the private network."""

    def __init__(self, root: Path, address: str) -> None:
        super().__init__(root)
        self.address = address
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {address.rsplit('.', 1)[0]}.0/24 trust\n")

    @property
    def net_url(self) -> str:
        return f"postgresql://postgres@{self.address}:{self.port}/postgres"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1,{self.address} -c fsync=off"
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w",
                          "start")


class NetCluster(Cluster):
    """:class:`Cluster` whose services run on hosts of ``net``."""

    def __init__(self, env: dict[str, str], tmp: Path, net: Network) -> None:
        super().__init__(env, tmp)
        self.net = net

    def start_on(self, host: Host, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("ab")
        argv = self.net.command(host, [sys.executable, "-m", "spotsweep", *args])
        proc = subprocess.Popen(argv, env={**self.env, **(env or {})}, stdout=log, stderr=log, start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def wait_address(address: str, port: int, timeout: float = 30.0) -> None:
    """Wait until something listens on ``address:port`` (from this thread's namespace)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {address}:{port} after {timeout:g} s") from None
            time.sleep(0.1)


@dataclass
class Site:
    net: Network
    servers: Host
    rabbit: NetRabbit
    pg: NetPostgres
    cluster: NetCluster
    root: Path

    def host(self, name: str) -> Host:
        return self.net.hosts.get(name) or self.net.add_host(name)

    def on_servers(self) -> AbstractContextManager[None]:
        """This thread on the servers' host: for psycopg to 127.0.0.1 and for rabbitmqctl."""
        return self.net.inside(self.servers)


S3_ENV = {"SPOTSWEEP_S3_ACCESS_KEY": "testing", "SPOTSWEEP_S3_SECRET_KEY": "testing-secret",
          "SPOTSWEEP_S3_BUCKET": "netns", "SPOTSWEEP_S3_REGION": "us-east-1"}


@contextmanager
def open_site(root: Path) -> Iterator[Site]:
    """The network, the servers' host with RabbitMQ, PostgreSQL and moto running, and a
    cluster whose services get their URLs; all of it gone afterwards, whatever happened."""
    net = Network()  # NetnsUnavailable where namespaces cannot be made
    moto: subprocess.Popen[bytes] | None = None
    rabbit: NetRabbit | None = None
    pg: NetPostgres | None = None
    cluster: NetCluster | None = None
    try:
        servers = net.add_host("servers")
        with net.inside(servers):
            rabbit = NetRabbit(root / "rabbit", servers.address)
            rabbit.start()
            pg = NetPostgres(root / "pg", servers.address)
            pg.start()
            s3_port = free_port()
            moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", servers.address, "-p", str(s3_port)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_address(servers.address, s3_port)
        env = {**os.environ, "SPOTSWEEP_AMQP_URL": rabbit.net_url, "SPOTSWEEP_DATABASE_URL": pg.net_url,
               "SPOTSWEEP_HOME": str(root / "home"), "SPOTSWEEP_HEARTBEAT": str(HEARTBEAT),
               "SPOTSWEEP_S3_ENDPOINT": f"http://{servers.address}:{s3_port}", **S3_ENV}
        (root / "logs").mkdir()
        cluster = NetCluster(env, root / "logs", net)
        yield Site(net, servers, rabbit, pg, cluster, root)
    finally:
        if cluster is not None:
            cluster.kill_all()
        if moto is not None:
            moto.kill()
            moto.wait(10)
        with net.inside(net.hosts["servers"]) if "servers" in net.hosts else nullcontext():
            for server in (pg, rabbit):
                if server is not None:
                    try:
                        server.kill9()
                    except Exception as e:  # noqa: BLE001 - best effort: the namespaces go anyway
                        print(f"stopping {type(server).__name__} failed: {e}", file=sys.stderr)
        net.teardown()
