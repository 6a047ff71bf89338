"""Which URL an input may fetch and from which address, hop by hop: pure decisions (issue 39).

A spec's URL is the submitter's, and so is every redirect its server sends:
without a policy an agent fetches whatever they point at with the node's
network position (the cloud's metadata service and its instance
credentials, a database on loopback, a neighbour on the private network)
and links the answer into the trial's folder. So every hop is judged
before its request is sent:

* :func:`hop_refusal`: ``http`` and ``https`` only; never from ``https``
  down to plain ``http``; a plain ``http`` hop only when the spec gives the
  file's ``sha256`` (nothing else vouches for what arrives);
* :func:`address_refusal`: every address the host resolves to must be a
  public one: loopback, link-local (169.254.0.0/16, fe80::/10, where the
  metadata services live), private (RFC 1918, fc00::/7), shared (100.64/10,
  where Alibaba's metadata lives), unspecified, multicast and reserved
  addresses are refused, an IPv4 address inside IPv6 (``::ffff:a.b.c.d``,
  6to4, NAT64) judged as the IPv4 one, unless the operator allows the host
  (:attr:`Policy.allow`, ``--allow-input-hosts``: names, addresses or
  networks).

The caller connects to the address it checked (:mod:`.inputs_url`), so a
name that resolves differently the second time (DNS rebinding) gains
nothing. :class:`Budget` is the download's clock: its deadline, its
throughput floor; :func:`over_cap` its size cap.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from spotsweep.shared.errors import PermanentError

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")
WINDOW_S = 30.0  # the throughput floor is judged over windows this long
MAX_HOPS = 5  # redirects followed at most


@dataclass(frozen=True)
class Policy:
    """The operator's rules for URL inputs (agent flags; docs/trial-contract.md, URL inputs)."""

    allow: tuple[str, ...] = ()  # --allow-input-hosts: host names (lower case), addresses or networks (CIDR)
    max_bytes: int = 50 * 2**30  # --max-input-bytes (at most --input-cache-size): one file's most
    deadline_s: float = 3600.0  # --input-deadline: one download's whole time, redirects included
    min_rate: float = 16 * 1024  # --input-min-rate (KiB/s, kept in bytes/s): the floor over each WINDOW_S

    @classmethod
    def from_setting(cls, hosts: str | None, max_bytes: int, deadline_s: float, min_kib_s: float) -> Policy:
        """The policy of the agent's flags (``--allow-input-hosts HOST[,HOST]``); a bad network stops the agent."""
        allow = tuple(h.strip().lower().strip("[]") for h in (hosts or "").split(",") if h.strip())
        for entry in allow:
            if "/" in entry:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError as e:
                    raise PermanentError(f"--allow-input-hosts: {entry!r} is not a network (10.0.0.0/8): {e}") from e
        return cls(allow=allow, max_bytes=max_bytes, deadline_s=deadline_s, min_rate=min_kib_s * 1024)


def address_refusal(address: str | IP) -> str | None:
    """Why an input may not be fetched from ``address`` (without the operator's leave); None: a public address."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in NAT64 else None)
        if inner is not None:
            ip = inner
    if ip in METADATA:
        return "a cloud metadata service's address"
    for refused, what in ((ip.is_loopback, "a loopback address"), (ip.is_link_local, "a link-local address"),
                          (ip.is_unspecified, "the unspecified address"), (ip.is_multicast, "a multicast address"),
                          (ip.is_private, "a private address"), (ip.is_reserved, "a reserved address")):
        if refused:
            return what
    return None if ip.is_global else "not a public address"


def allowed(host: str, ip: IP, allow: tuple[str, ...]) -> bool:
    """Whether the operator allows ``host`` (by its name) or ``ip`` (by address or network)."""
    for entry in allow:
        if entry == host.lower():
            return True
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a host name
    return False


def hop_refusal(url: str, previous: str | None, sha256: str | None) -> str | None:
    """Why one hop (the spec's URL, or a redirect from ``previous``) may not be requested; None: it may."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https") or not urlsplit(url).hostname:
        return "only http:// and https:// URLs with a host are fetched"
    if scheme == "http" and previous is not None and urlsplit(previous).scheme.lower() == "https":
        return "a redirect from https:// down to plain http://"
    if scheme == "http" and sha256 is None:
        return "a plain http:// URL needs the spec's sha256 (nothing else vouches for what arrives)"
    return None


def refused_addresses(host: str, addresses: list[IP], policy: Policy) -> str | None:
    """Why ``host`` may not be fetched from, judged on every address it resolved to; None: it may."""
    for ip in addresses:
        why = address_refusal(ip)
        if why is not None and not allowed(host, ip, policy.allow):
            return (f"{host} resolves to {ip}, {why}; an operator may allow the host with the agent's "
                    "--allow-input-hosts")
    return None


def over_cap(size: int, policy: Policy) -> str | None:
    """Why a file of ``size`` bytes (announced, or received so far) is refused; None within the cap."""
    if size > policy.max_bytes:
        return (f"the file is larger than this agent's cap of {policy.max_bytes} bytes (--max-input-bytes, at most "
                "--input-cache-size)")
    return None


@dataclass
class Budget:
    """One download's clock: its deadline and its throughput floor, judged at ``now`` (monotonic seconds)."""

    policy: Policy
    started: float
    window_start: float | None = None
    window_bytes: int = 0

    def check(self, now: float, received: int) -> str | None:
        """Why the download must end now, with ``received`` bytes so far; None while it keeps within its limits."""
        if now - self.started > self.policy.deadline_s:
            return (f"the download took more than {self.policy.deadline_s:g} s (--input-deadline) with {received} "
                    "bytes received")
        if self.window_start is None:
            self.window_start = self.started
        if now - self.window_start >= WINDOW_S:
            rate = (received - self.window_bytes) / (now - self.window_start)
            if rate < self.policy.min_rate:
                return (f"the server sent {rate / 1024:.2f} KiB/s over {now - self.window_start:.0f} s, under this "
                        f"agent's floor of {self.policy.min_rate / 1024:g} KiB/s (--input-min-rate)")
            self.window_start, self.window_bytes = now, received
        return None
