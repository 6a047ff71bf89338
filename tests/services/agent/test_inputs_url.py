"""URL inputs against a local HTTP server: fetched once per node, checked, read-only, one version per trial."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_servers import Server, self_signed

from spotsweep.services.agent import inputs
from spotsweep.services.agent.inputs_url import Guard
from spotsweep.services.agent.url_policy import Policy
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import Input
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.spec import parse_spec


LOOPBACK = Guard(Policy(allow=("127.0.0.1",)))  # the test servers are on loopback, which only the operator allows


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "www").mkdir()
    s = Server(tmp_path / "www")
    yield s
    s.close()


@pytest.fixture()
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """As ``server``, over https with a certificate the agent's default TLS context trusts (SSL_CERT_FILE)."""
    (tmp_path / "www").mkdir(exist_ok=True)
    pem = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    s = Server(tmp_path / "www", pem=pem)
    yield s
    s.close()


def message(items: list[Input], trial: str = "sw.0") -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id=trial, attempt=1, trial_name="t", index=0, params={},
                        argv=["true"], metric="loss", inputs=items)


def stage(msg: TrialMessage, tmp: Path, run: str) -> inputs.ExitStack:
    """Stage ``msg``'s inputs into a new run folder; the caller closes the stack when the trial ends."""
    (tmp / run).mkdir()
    stack = inputs.ExitStack()
    stack.enter_context(inputs.staged(msg, LocalArtifactStore(tmp / "store"), tmp / "cache", tmp / run, 2**30,
                                      guard=LOOPBACK))
    return stack


def test_six_trials_at_once_fetch_a_checked_file_once_and_cannot_write_to_it(server: Server, tmp_path: Path) -> None:
    data = b"tokens" * 100_000
    (tmp_path / "www" / "train.bin").write_bytes(data)
    spec = {"name": "s", "command": "python t.py", "metric": {"name": "loss"},
            "inputs": [{"from": server.url("train.bin"), "to": "data", "sha256": hashlib.sha256(data).hexdigest()}]}
    items = parse_spec(spec).inputs
    barrier, seen, stacks = threading.Barrier(6), [], []

    def trial(i: int) -> None:
        barrier.wait()
        stacks.append(stage(message(items, f"sw.{i}"), tmp_path, f"run{i}"))
        seen.append((tmp_path / f"run{i}" / "data" / "train.bin").read_bytes())

    threads = [threading.Thread(target=trial, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:  # a waiter must wait on the download only, never on the trials already using the tree
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a trial waits for the others to end before it can start"
    assert seen == [data] * 6
    assert server.gets == {"/train.bin": 1}  # one download for six trials; the others asked nothing
    file = (tmp_path / "run0" / "data" / "train.bin").resolve()
    gate = 0o750 if os.geteuid() == 0 else 0o555  # as root, the tree's top folder is its gate (tree_gate.py)
    assert file.stat().st_mode & 0o777 == 0o444 and file.parent.stat().st_mode & 0o777 == gate
    for stack in stacks:
        stack.close()


def test_a_file_that_is_not_what_the_spec_says_is_refused_and_not_cached(server: Server, tmp_path: Path) -> None:
    (tmp_path / "www" / "w.bin").write_bytes(b"tampered")
    bad = Input.model_validate({"from": server.url("w.bin"), "to": "w", "sha256": hashlib.sha256(b"real").hexdigest()})
    with pytest.raises(PermanentError, match="the file's sha256 is .*, not the spec's"):
        stage(message([bad]), tmp_path, "r1")
    assert [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == []
    missing = Input.model_validate({"from": server.url("gone.bin"), "to": "w", "sha256": "0" * 64})
    with pytest.raises(PermanentError, match="answered 404"):
        stage(message([missing]), tmp_path, "r2")


def test_without_a_digest_the_servers_headers_name_the_version_and_a_trial_keeps_its_own(
        tls_server: Server, tmp_path: Path) -> None:
    server = tls_server
    item = Input.model_validate({"from": server.url("v.txt"), "to": "data"})
    (tmp_path / "www" / "v.txt").write_bytes(b"one")
    def unchecked(trial: str) -> TrialMessage:
        return message([], trial).model_copy(update={"inputs": [item]})

    first = unchecked("sw.0")
    stage(first, tmp_path, "a").close()
    stage(unchecked("sw.1"), tmp_path, "b").close()  # the same version: the body is not read again
    (tmp_path / "www" / "v.txt").write_bytes(b"two!")  # a new length: a new version whatever the clock says
    with stage(first, tmp_path, "c"):  # the first trial, resumed: its own version
        assert (tmp_path / "c" / "data" / "v.txt").read_bytes() == b"one"
    with stage(unchecked("sw.2"), tmp_path, "d"):  # a new trial: the new one
        assert (tmp_path / "d" / "data" / "v.txt").read_bytes() == b"two!"
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 2
    assert server.gets == {"/v.txt": 4}  # each staging asks for the headers; two bodies were read
