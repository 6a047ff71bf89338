"""Many hosts on one machine: Linux network namespaces joined by a private bridge.

Each "host" is a network namespace with its own loopback and one ``eth0``
(a veth pair whose other end is a port of a bridge that lives in a namespace
of its own), on a private /24. Nothing is added to the machine's own
namespace: every interface, address and route lives in namespaces this
module created, whose names carry the creating process id and a random
suffix, so two runs never meet and a run killed before its clean-up is
cleaned up by the next one (its pid is gone).

A host's link is cut by taking its bridge port off the bridge: the host's
``eth0`` keeps its carrier, nothing on the host notices, and every packet
to or from it is dropped silently, as when a switch or a route fails; only
timeouts (AMQP heartbeats) can tell. ``restore`` puts the port back.

The test process itself can step into a host (``inside``), which moves the
calling thread only (``setns``), so that the private servers of
tests/support/servers.py, which bind loopback and talk to their own
``rabbitmqctl``/``pg_ctl``, can be started in the servers' host unchanged.
Services are started there with ``ip netns exec`` (``command``).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from waiting import alive

PREFIX = "sswt"  # spotsweep test: sswt-<pid>-<hex>-<host>
CLONE_NEWNET = 0x40000000
BRIDGE = "br0"


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be created here (not root, no ``ip``, a sandbox that forbids it)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetnsUnavailable("iproute2's ip command is not installed; the multi-host test needs it") from None
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _setns(fd: int, what: str) -> None:
    """Move the calling thread into the network namespace open at ``fd`` (Python 3.12 has os.setns)."""
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({what}): {os.strerror(err)}")


def _kill_namespace_processes(ns: str) -> None:
    """SIGKILL every process inside ``ns`` (ours: only what we started lives there, e.g. epmd)."""
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in (int(p) for p in pids if p.isdigit() and int(p) != os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_stale() -> list[str]:
    """Delete namespaces left by earlier runs whose process is gone (killed before
    cleaning up); only names of this module's shape. The names removed."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}-(\d+)-[0-9a-f]+-\w+", name)
        if m and not alive(int(m.group(1))):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def established(port: int, peer: str) -> int:
    """TCP connections ESTABLISHED between local ``port`` and ``peer``'s address, in the calling
    thread's namespace (/proc, so polling costs nothing; RabbitMQ closing a silent peer's
    connection leaves it FIN_WAIT1, no longer counted here)."""
    want = "".join(f"{int(b):02X}" for b in reversed(peer.split(".")))
    count = 0
    for line in Path("/proc/thread-self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        count += state == "01" and int(local.split(":")[1], 16) == port and remote.split(":")[0] == want
    return count


@dataclass
class Host:
    name: str  # short, as the test calls it: "servers", "agent1"
    ns: str  # the namespace's name (for ip netns exec)
    address: str  # eth0's address on the private network
    port: str  # its bridge port's name, in the bridge's namespace


@dataclass
class Network:
    """A bridge namespace and hosts on ``subnet`` (``10.213.7``: hosts get .1, .2, ...)."""

    subnet: str = "10.213.7"
    suffix: str = field(default_factory=lambda: f"{os.getpid()}-{uuid.uuid4().hex[:6]}")
    hosts: dict[str, Host] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        remove_stale()
        try:
            self.bridge_ns = self._namespace("net")
            _ip("-n", self.bridge_ns, "link", "add", BRIDGE, "type", "bridge")
            _ip("-n", self.bridge_ns, "link", "set", BRIDGE, "up")
        except BaseException:
            self.teardown()
            raise

    def _namespace(self, name: str) -> str:
        ns = f"{PREFIX}-{self.suffix}-{name}"
        proc = _ip("netns", "add", ns, check=False)
        if proc.returncode != 0:
            raise NetnsUnavailable(f"cannot create a network namespace (ip netns add: {proc.stderr.strip() or proc.returncode}); "
                                   "the multi-host test needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2")
        self.namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def add_host(self, name: str) -> Host:
        """A new namespace with ``eth0`` on the bridge, at the next address."""
        ns = self._namespace(name)
        address = f"{self.subnet}.{len(self.hosts) + 1}"
        port = f"p{len(self.hosts) + 1}"
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.bridge_ns)
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", self.bridge_ns, "link", "set", port, "master", BRIDGE)
        _ip("-n", self.bridge_ns, "link", "set", port, "up")
        self.hosts[name] = host = Host(name, ns, address, port)
        return host

    def cut(self, host: Host) -> None:
        """Partition ``host`` from every other: its port leaves the bridge (silent drops, carrier kept)."""
        _ip("-n", self.bridge_ns, "link", "set", host.port, "nomaster")

    def restore(self, host: Host) -> None:
        _ip("-n", self.bridge_ns, "link", "set", host.port, "master", BRIDGE)

    def command(self, host: Host, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` (``ip netns exec`` execs it: the pid is the program's)."""
        return ["ip", "netns", "exec", host.ns, *argv]

    @contextmanager
    def inside(self, host: Host) -> Iterator[None]:
        """The calling thread (and what it starts) in ``host``'s network namespace, then back."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{host.ns}", os.O_RDONLY)
        try:
            _setns(there, host.ns)
            try:
                yield
            finally:
                _setns(back, "the thread's own namespace")
        finally:
            os.close(there)
            os.close(back)

    def teardown(self) -> None:
        """Kill whatever still runs in our namespaces and delete them (their veths go with them)."""
        for ns in reversed(self.namespaces):
            _kill_namespace_processes(ns)
        deadline = time.monotonic() + 10
        for ns in reversed(self.namespaces):
            while _ip("netns", "pids", ns, check=False).stdout.split() and time.monotonic() < deadline:
                time.sleep(0.05)
            _ip("netns", "del", ns, check=False)
        self.namespaces.clear()

