"""URL inputs against a local HTTP server: fetched once per node, checked, read-only, one version per trial."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotsweep.services.agent import inputs
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import Input
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.spec import parse_spec


class Server:
    """Serves a folder over HTTP on loopback; counts the GETs of each path."""

    def __init__(self, root: Path) -> None:
        gets: dict[str, int] = {}
        self.gets = gets

        class Handler(http.server.SimpleHTTPRequestHandler):  # sends Last-Modified and Content-Length
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                gets[self.path] = gets.get(self.path, 0) + 1
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path}"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "www").mkdir()
    s = Server(tmp_path / "www")
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def message(items: list[Input], trial: str = "sw.0") -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id=trial, attempt=1, trial_name="t", index=0, params={},
                        argv=["true"], metric="loss", inputs=items)


def stage(msg: TrialMessage, tmp: Path, run: str) -> inputs.ExitStack:
    """Stage ``msg``'s inputs into a new run folder; the caller closes the stack when the trial ends."""
    (tmp / run).mkdir()
    stack = inputs.ExitStack()
    stack.enter_context(inputs.staged(msg, LocalArtifactStore(tmp / "store"), tmp / "cache", tmp / run, 2**30))
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
    assert file.stat().st_mode & 0o777 == 0o444 and file.parent.stat().st_mode & 0o777 == 0o555
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
        server: Server, tmp_path: Path) -> None:
    # Over plain http only for the test (the spec asks https:// or a sha256): the headers are what is tested.
    item = Input.model_construct(source=server.url("v.txt"), to="data", sha256=None)
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
