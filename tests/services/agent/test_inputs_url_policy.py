"""URL inputs' address policy and limits (issue 39): the pure decisions, then one download each against local servers."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_servers import Route, Server, body, redirect, self_signed, status

from spotsweep.services.agent import inputs_url
from spotsweep.services.agent.inputs_url import Aborted, Guard
from spotsweep.services.agent.stop_policy import RunControls
from spotsweep.services.agent.url_policy import Budget, Policy, address_refusal, allowed, hop_refusal
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import Input

SHA = "0" * 64


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("192.168.1.1", "private"), ("fc00::1", "private"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"), ("100.100.100.200", "metadata"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("100.64.0.1", "not a public"), ("::ffff:127.0.0.1", "loopback"), ("2002:a9fe:a9fe::", "metadata"),
    ("64:ff9b::a9fe:a9fe", "metadata"),
])
def test_internal_addresses_are_refused_with_their_class(address: str, why: str) -> None:
    refusal = address_refusal(address)
    assert refusal is not None and why in refusal


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111", "8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(address) is None


def test_the_operator_allows_a_host_by_name_address_or_network() -> None:
    import ipaddress
    ip = ipaddress.ip_address("10.0.0.7")
    assert allowed("mirror.internal", ip, ("mirror.internal",))
    assert allowed("x", ip, ("10.0.0.0/8",)) and allowed("x", ip, ("10.0.0.7",))
    assert not allowed("other.internal", ip, ("mirror.internal", "192.168.0.0/16"))
    assert Policy.from_setting(" Mirror.Internal , [::1] ", 1, 1, 1).allow == ("mirror.internal", "::1")
    with pytest.raises(PermanentError, match="--allow-input-hosts: '10.0.0.0/99'"):
        Policy.from_setting("10.0.0.0/99", 1, 1, 1)


def test_every_hop_keeps_https_and_plain_http_needs_sha256() -> None:
    assert hop_refusal("https://a/f", None, None) is None
    assert hop_refusal("http://a/f", None, SHA) is None
    assert "needs the spec's sha256" in str(hop_refusal("http://b/f", "http://a/f", None))
    assert "from https:// down to plain http://" in str(hop_refusal("http://b/f", "https://a/f", SHA))
    assert "only http:// and https://" in str(hop_refusal("file:///etc/passwd", "https://a/f", SHA))


def test_the_budget_ends_a_download_past_its_deadline_or_under_its_floor() -> None:
    policy = Policy(deadline_s=100, min_rate=1024)
    budget = Budget(policy, started=0.0)
    assert budget.check(29.0, 10) is None  # the floor is judged over whole windows
    assert budget.check(30.0, 60 * 1024) is None  # 2 KiB/s: over the floor
    assert "KiB/s" in str(budget.check(60.0, 61 * 1024))  # 1 KiB in 30 s
    assert "--input-deadline" in str(Budget(policy, 0.0).check(101.0, 10**9))


@pytest.fixture()
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for s in made:
        s.close()


def serve(made: list[Server], routes: dict[str, Route], host: str = "127.0.0.1", pem: Path | None = None) -> Server:
    made.append(Server(routes=routes, host=host, pem=pem))
    return made[-1]


def item(url: str, sha256: str | None = SHA) -> Input:
    return Input.model_validate({"from": url, "to": "d", **({"sha256": sha256} if sha256 else {})})


ONLY_FIRST = Guard(Policy(allow=("127.0.0.1",), deadline_s=20))


def test_a_redirect_to_a_host_the_operator_did_not_allow_is_refused_before_it_is_requested(
        servers: list[Server], tmp_path: Path) -> None:
    inner = serve(servers, {"/creds": body(5)}, host="127.0.0.2")  # the "metadata service" stand-in
    outer = serve(servers, {"/f": redirect(inner.url("creds"))})
    with pytest.raises(PermanentError, match=r"redirected to http://127.0.0.2:\d+/creds\): refused: 127.0.0.2 "
                                             "resolves to 127.0.0.2, a loopback address"):
        inputs_url.fetch(item(outer.url("f")), tmp_path, ONLY_FIRST)
    assert inner.requests == 0 and outer.requests == 1


def test_an_https_url_redirecting_to_plain_http_is_refused_before_the_second_request(
        servers: list[Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    pem = self_signed(tmp_path)
    plain = serve(servers, {"/f": body(5)})
    tls = serve(servers, {"/f": redirect(plain.url("f"))}, pem=pem)
    with pytest.raises(PermanentError, match="from https:// down to plain http://"):
        inputs_url.fetch(item(tls.url("f")), tmp_path, ONLY_FIRST)
    assert tls.requests == 1 and plain.requests == 0


def test_loops_and_too_many_redirects_are_refused(servers: list[Server], tmp_path: Path) -> None:
    s = serve(servers, {})
    s.routes.update({"/a": redirect(s.url("b")), "/b": redirect(s.url("a"))})
    s.routes.update({f"/h{i}": redirect(s.url(f"h{i + 1}")) for i in range(10)})
    with pytest.raises(PermanentError, match="a redirect loop"):
        inputs_url.fetch(item(s.url("a")), tmp_path, ONLY_FIRST)
    with pytest.raises(PermanentError, match="more than 5 redirects"):
        inputs_url.fetch(item(s.url("h0")), tmp_path, ONLY_FIRST)
    assert s.gets["/h5"] == 1 and "/h6" not in s.gets


def test_the_address_judged_is_the_one_connected_to(servers: list[Server], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that resolves to an allowed address once and to another one later (DNS rebinding) gets nowhere."""
    good = serve(servers, {"/f": body(3, b"abc")})
    port = good.httpd.server_address[1]
    servers.append(Server(routes={"/f": body(3, b"bad")}, host="127.0.0.2", port=port))
    evil = servers[-1]
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2"])
    calls = []

    def rebinding(host: str, *args: object, **kwargs: object) -> list:
        calls.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://rebind.test:{port}/f"
    inputs_url.fetch(item(url, hashlib.sha256(b"abc").hexdigest()), tmp_path, Guard(Policy(allow=("127.0.0.1",))))
    assert (tmp_path / "f").read_bytes() == b"abc" and calls == ["rebind.test"] and evil.requests == 0


def test_server_errors_and_short_bodies_are_input_errors_naming_what_the_server_did(
        servers: list[Server], tmp_path: Path) -> None:
    s = serve(servers, {"/500": status(500), "/404": status(404), "/short": body(10, announced=100)})
    with pytest.raises(PermanentError, match="the server answered 500 Internal Server Error"):
        inputs_url.fetch(item(s.url("500")), tmp_path, ONLY_FIRST)
    with pytest.raises(PermanentError, match="answered 404"):
        inputs_url.fetch(item(s.url("404")), tmp_path, ONLY_FIRST)
    with pytest.raises(PermanentError, match="10 bytes arrived of the 100 the server announced"):
        inputs_url.fetch(item(s.url("short")), tmp_path, ONLY_FIRST)


def test_an_endless_body_stops_at_the_cap(servers: list[Server], tmp_path: Path) -> None:
    s = serve(servers, {"/endless": body(None), "/big": body(10, announced=10**12)})
    capped = Guard(Policy(allow=("127.0.0.1",), max_bytes=2**20))
    with pytest.raises(PermanentError, match=r"larger than this agent's cap of 1048576 bytes .*stopped after"):
        inputs_url.fetch(item(s.url("endless")), tmp_path, capped)
    assert (tmp_path / "endless").stat().st_size <= 2**20
    with pytest.raises(PermanentError, match="the server announced 1000000000000"):
        inputs_url.fetch(item(s.url("big")), tmp_path, capped)


def test_a_dripping_server_ends_by_the_deadline_and_a_stopped_run_abandons_it(
        servers: list[Server], tmp_path: Path) -> None:
    s = serve(servers, {"/drip": body(None, b"x", every=0.5)})
    began = time.monotonic()
    with pytest.raises(PermanentError, match=r"took more than 2 s \(--input-deadline\)"):
        inputs_url.fetch(item(s.url("drip")), tmp_path, Guard(Policy(allow=("127.0.0.1",), deadline_s=2)))
    assert time.monotonic() - began < 10
    cancelled = threading.Event()
    threading.Timer(1.0, cancelled.set).start()
    began = time.monotonic()
    with pytest.raises(Aborted, match="the run was cancelled") as e:
        inputs_url.fetch(item(s.url("drip")), tmp_path,
                         Guard(Policy(allow=("127.0.0.1",)), lambda: "cancelled" if cancelled.is_set() else None))
    assert e.value.reason == "cancelled" and time.monotonic() - began < 5


def test_a_runs_controls_say_why_its_download_is_abandoned() -> None:
    stops: dict[str, str] = {}
    cancelled = threading.Event()
    control = RunControls(cancelled=cancelled.is_set, stopped=stops.get)
    halted = Guard.for_run(Policy(), control, "run-1").halted
    assert halted() is None
    cancelled.set()
    assert halted() == "cancelled"
    stops["run-1"] = "pruned"
    assert halted() == "stopped"
    control.lost.set()
    assert halted() == "lost"
