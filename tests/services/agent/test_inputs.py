"""A spec's ``inputs``: validated with field-named errors, keyed by content, staged once, evicted LRU.

The same path over moto's S3 with six trials of the real runner is in
tests/integration/test_inputs_s3.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent import inputs
from spotsweep.services.planner.outbox import trial_message
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.artifacts.port import ObjectInfo
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.messages import Envelope, TrialMessage
from spotsweep.shared.errors import SpecError
from spotsweep.shared.inputs import Input
from spotsweep.shared.spec import parse_spec


class Buckets(LocalArtifactStore):
    """A local store whose other buckets are sibling folders; counts the files it serves."""

    def __init__(self, root: Path) -> None:
        super().__init__(root / "spotsweep")
        self.bucket = "spotsweep"
        self.top, self.gets = root, 0
        self._count = threading.Lock()

    def in_bucket(self, bucket: str) -> Buckets:
        other = Buckets(self.top)
        other.root = self.top / bucket
        other.gets, other._count = 0, self._count
        other.shared = self
        return other

    def get_file(self, key: str, path: Path) -> None:
        with self._count:
            getattr(self, "shared", self).gets += 1
        super().get_file(key, path)


def spec(**extra: Any) -> dict[str, Any]:
    return {"name": "s", "command": "python train.py", "metric": {"name": "loss"}, **extra}


@pytest.mark.parametrize(("given", "field", "words"), [
    ([{"from": "s3://datasets/ts/", "to": "../up"}], "inputs[0].to", "relative path"),
    ([{"from": "s3://datasets/ts/", "to": "/abs"}], "inputs[0].to", "relative path"),
    ([{"from": "ftp://example.com/x.tar", "to": "data"}], "inputs[0].from", "https:// URL of a file"),
    ([{"from": "https://example.com/", "to": "data"}], "inputs[0].from", "URL of one file"),
    ([{"from": "https://user:pw@example.com/x.tar", "to": "data"}], "inputs[0].from", "without credentials"),
    ([{"from": "http://example.com/x.tar", "to": "data"}], "inputs[0]", "needs sha256"),
    ([{"from": "s3://a/x/", "to": "data", "sha256": "0" * 64}], "inputs[0]", "sha256 is for a URL"),
    ([{"from": "https://example.com/x.tar", "to": "data", "sha256": "xyz"}], "inputs[0].sha256", ""),
    ([{"from": "s3:///nobucket/", "to": "data"}], "inputs[0].from", "must name a bucket"),
    ([{"from": "s3://datasets/ts/v3", "to": "data"}], "inputs[0].from", "ending in '/'"),
    ([{"from": "s3://a/x/", "to": "data"}, {"from": "s3://a/y/", "to": "data/sub"}], "inputs", "neither inside"),
    ([{"from": "s3://a/x/", "to": "data", "mode": "rw"}], "inputs[0].mode", ""),
])
def test_a_bad_input_is_named_by_its_field(given: list[dict[str, str]], field: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec(inputs=given))
    assert field in str(e.value) and words in str(e.value), str(e.value)


def test_inputs_go_from_the_spec_into_the_trial_message_and_back() -> None:
    parsed = parse_spec(spec(inputs=[{"from": "s3://datasets/ts/v3/", "to": "data"}, {"from": "/mnt/w", "to": "w"}]))
    assert parsed.to_json_dict()["inputs"][0] == {"from": "s3://datasets/ts/v3/", "to": "data"}
    row = {"sweep_id": "sw", "trial_id": "sw.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}
    msg = trial_message(row, parsed)  # what the planner publishes
    again = TrialMessage.model_validate_json(msg.model_dump_json())
    assert again.inputs == parsed.inputs and again.inputs[0].bucket_prefix == ("datasets", "ts/v3/")


def test_the_version_is_the_listings_content() -> None:
    a = [ObjectInfo("p/x", 3, None, "e1"), ObjectInfo("p/y", 4, None, "e2")]
    assert inputs.version_of("b", "p/", a) == inputs.version_of("b", "p/", list(reversed(a)))
    assert inputs.version_of("b", "p/", a) == inputs.version_of("b", "q/", [ObjectInfo("q/x", 3, None, "e1"),
                                                                            ObjectInfo("q/y", 4, None, "e2")])
    changed = [a[0], ObjectInfo("p/y", 4, None, "e3")]
    assert inputs.version_of("b", "p/", changed) != inputs.version_of("b", "p/", a)
    assert inputs.version_of("b", "p/", a[:1]) != inputs.version_of("b", "p/", a)
    assert inputs.version_of("c", "p/", a) != inputs.version_of("b", "p/", a)


def message(items: Any, trial: str = "sw.0") -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id=trial, attempt=1, trial_name="t", index=0, params={},
                        argv=["true"], metric="loss", inputs=items)


def put(root: Path, bucket: str, key: str, data: bytes) -> None:
    path = root / bucket / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_many_trials_at_once_download_once_and_see_a_read_only_tree(tmp_path: Path) -> None:
    store = Buckets(tmp_path / "s3")
    put(tmp_path / "s3", "datasets", "ts/a.bin", b"a" * 1000)
    put(tmp_path / "s3", "datasets", "ts/sub/b.bin", b"b" * 10)
    items = parse_spec(spec(inputs=[{"from": "s3://datasets/ts/", "to": "in/data"}])).inputs
    runs = [tmp_path / f"run{i}" for i in range(6)]
    barrier, done = threading.Barrier(6), threading.Event()
    seen: list[bytes] = []

    def trial(run: Path) -> None:
        run.mkdir()
        barrier.wait()
        with inputs.staged(message(items, f"sw.{run.name}"), store, tmp_path / "cache", run, 2**30):
            seen.append((run / "in" / "data" / "sub" / "b.bin").read_bytes())
            done.wait(5)

    threads = [threading.Thread(target=trial, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for _ in range(50):
        if len(seen) == 6:
            break
        threading.Event().wait(0.1)
    done.set()
    for t in threads:
        t.join()
    assert seen == [b"b" * 10] * 6
    assert store.gets == 2  # two objects, fetched once for six trials
    tree = (runs[0] / "in" / "data").resolve()
    gate = 0o750 if os.geteuid() == 0 else 0o555  # as root, behind its own gate (tree_gate.py); the files read-only
    assert (tree / "a.bin").stat().st_mode & 0o777 == 0o444 and tree.stat().st_mode & 0o777 == gate
    assert all((r / "in" / "data").resolve() == tree for r in runs)  # one tree on the node


def test_a_trial_keeps_its_first_version_and_fails_when_the_node_lost_it(tmp_path: Path) -> None:
    store = Buckets(tmp_path / "s3")
    put(tmp_path / "s3", "d", "p/x", b"one")
    items = parse_spec(spec(inputs=[{"from": "s3://d/p/", "to": "data"}])).inputs
    msg, cache = message(items), tmp_path / "cache"
    (tmp_path / "r1").mkdir()
    with inputs.staged(msg, store, cache, tmp_path / "r1", 2**30):
        pass
    first = json.loads(store.get_bytes(inputs.pin_key(msg)))["data"]
    put(tmp_path / "s3", "d", "p/x", b"two!")  # the object changed: a new version
    (tmp_path / "r2").mkdir()
    with inputs.staged(msg, store, cache, tmp_path / "r2", 2**30):  # the same trial, resumed
        assert (tmp_path / "r2" / "data" / "x").read_bytes() == b"one"
    (tmp_path / "r3").mkdir()
    with inputs.staged(message(items, "sw.1"), store, cache, tmp_path / "r3", 2**30):  # a new trial: the new one
        assert (tmp_path / "r3" / "data" / "x").read_bytes() == b"two!"
    inputs.evict(cache, 0)
    (tmp_path / "r4").mkdir()
    with pytest.raises(PermanentError, match=f"changed since the trial's first attempt \\(version {first}"):
        with inputs.staged(msg, store, cache, tmp_path / "r4", 2**30):
            pass


def test_the_least_recently_used_tree_no_trial_holds_goes_first(tmp_path: Path) -> None:
    store = Buckets(tmp_path / "s3")
    for name in ("old", "mid", "new"):
        put(tmp_path / "s3", "d", f"{name}/f", b"x" * 100)
    cache, trees = tmp_path / "cache", {}
    for i, name in enumerate(("old", "mid", "new")):
        run = tmp_path / f"r{name}"
        run.mkdir()
        with inputs.staged(message(parse_spec(spec(inputs=[{"from": f"s3://d/{name}/", "to": "data"}])).inputs,
                                   f"sw.{i}"), store, cache, run, 2**30):
            trees[name] = (run / "data").resolve()
        os.utime(trees[name], (1000 + i, 1000 + i))
    held = message(parse_spec(spec(inputs=[{"from": "s3://d/old/", "to": "data"}])).inputs, "sw.0")
    (tmp_path / "again").mkdir()
    with inputs.staged(held, store, cache, tmp_path / "again", 2**30):  # "old" is in use (and just used)
        os.utime(trees["old"], (900, 900))  # ranked oldest all the same: being held is what spares it
        gone = inputs.evict(cache, 150)
    assert gone == [trees["mid"].name, trees["new"].name]  # least recently used first, until under the cap
    assert trees["old"].is_dir() and (trees["old"] / "f").read_bytes() == b"x" * 100
    assert inputs.evict(cache, 150) == []  # under the cap now
    assert inputs.evict(cache, 50) == [trees["old"].name]  # and no longer held


def test_a_killed_agents_half_download_is_deleted_once_no_one_downloads_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    half = cache / ".v1-abc123" / "tree"
    half.mkdir(parents=True)
    (half / "part").write_bytes(b"x")
    half.chmod(0o555)
    with inputs._locked(cache / ".v1.make", inputs.fcntl.LOCK_EX):  # a download still going on
        inputs.evict(cache, 2**30)
        assert (half / "part").exists()
    inputs.evict(cache, 2**30)
    assert not (cache / ".v1-abc123").exists()


def test_a_trial_waiting_on_a_download_never_waits_on_the_trials_already_using_the_tree(tmp_path: Path) -> None:
    """The others wait on the first download only: a trial that starts using the new tree holds it for
    hours, and a waiter that then wanted the tree's lock exclusively would wait that long (it did)."""
    cache, item = tmp_path / "cache", Input.model_validate({"from": "s3://d/x/", "to": "data"})
    cache.mkdir()
    got: list[Path] = []
    with inputs.ExitStack() as first, inputs.ExitStack() as second:
        with inputs._locked(cache / ".v1.make", inputs.fcntl.LOCK_EX):  # a download under way
            waiter = threading.Thread(target=lambda: got.append(inputs._hold(cache, "v1", None, second, item)),
                                      daemon=True)
            waiter.start()
            time.sleep(0.3)  # the waiter is blocked on the download by now
            (cache / "v1").mkdir()  # the download lands ...
            inputs._hold(cache, "v1", None, first, item)  # ... and its trial uses it, for its whole run
        waiter.join(timeout=10)
        assert got == [cache / "v1"], "the waiter still waits for the first trial to end"


def test_a_path_on_the_node_is_linked_as_it_is_and_a_taken_path_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "mnt" / "weights"
    shared.mkdir(parents=True)
    (shared / "w.bin").write_bytes(b"w")
    items = parse_spec(spec(inputs=[{"from": str(shared), "to": "models/base"}])).inputs
    run = tmp_path / "run"
    run.mkdir()
    allowed = (str(tmp_path / "mnt"),)  # --input-paths
    with inputs.staged(message(items), Buckets(tmp_path / "s3"), tmp_path / "cache", run, 2**30, node_paths=allowed):
        assert (run / "models" / "base" / "w.bin").read_bytes() == b"w" and (run / "models" / "base").is_symlink()
    again = tmp_path / "again"
    (again / "models" / "base").mkdir(parents=True)  # the trial's code has a folder there
    with pytest.raises(PermanentError, match="already has something at that path"):
        with inputs.staged(message(items), Buckets(tmp_path / "s3"), tmp_path / "cache", again, 2**30,
                           node_paths=allowed):
            pass


def test_an_attempt_whose_input_cannot_be_staged_fails_refused_before_it_starts(tmp_path: Path) -> None:
    from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial

    items = parse_spec(spec(inputs=[{"from": "s3://d/empty/", "to": "data"}])).inputs
    store, config = Buckets(tmp_path / "s3"), RunnerConfig(agent_id="a", workdir=tmp_path / "work")
    started: list[Envelope] = []
    final = run_trial(message(items), store, started.append, config, RunControls())
    assert final is not None and final.outcome == "failed" and final.failure == "refused", final
    assert final.error is not None and "inputs cannot be staged" in final.error and "no object under" in final.error
    assert [e.kind for e in started] == ["trial.staging"]  # staging was said; the command never ran (no trial.started)


def test_the_artifact_bucket_is_no_input_source(tmp_path: Path) -> None:
    """Its objects are every sweep's checkpoints and logs, which trials otherwise cannot read."""
    put(tmp_path / "s3", "spotsweep", "sweeps/other/trials/x/checkpoints/000000000001/model.pt", b"theirs")
    items = parse_spec(spec(inputs=[{"from": "s3://spotsweep/sweeps/other/", "to": "data"}])).inputs
    (tmp_path / "run").mkdir()
    with pytest.raises(PermanentError, match="not an input source"):
        with inputs.staged(message(items), Buckets(tmp_path / "s3"), tmp_path / "cache", tmp_path / "run", 2**30):
            pass
    assert not (tmp_path / "run" / "data").exists()


def test_a_tree_a_trial_changed_is_staged_again_never_handed_on(tmp_path: Path) -> None:
    """A root trial can write through 0444 (issue 40: 6 bytes appended to a shard broke every later trial's
    checksum): the next trial to link the tree finds it changed and gets a fresh copy of the same version."""
    store = Buckets(tmp_path / "s3")
    put(tmp_path / "s3", "d", "p/shard.bin", b"s" * 4096)
    put(tmp_path / "s3", "d", "p/sub/other", b"o")
    items, cache = parse_spec(spec(inputs=[{"from": "s3://d/p/", "to": "data"}])).inputs, tmp_path / "cache"
    changes = [lambda t: (t / "shard.bin").open("ab").write(b"oops!!"),       # append through 0444, as root can
               lambda t: os.utime(t / "sub" / "other", (0, 0)),               # a changed time, size kept
               lambda t: os.chmod(t / "sub", 0o777) or (t / "sub" / "new").write_bytes(b"n")]  # a file added
    for i, change in enumerate(changes):
        run = tmp_path / f"r{i}"
        run.mkdir()
        with inputs.staged(message(items, f"sw.{i}"), store, cache, run, 2**30):
            change((run / "data").resolve())
        gets = store.gets
        (tmp_path / f"n{i}").mkdir()
        with inputs.staged(message(items, f"sw.n{i}"), store, cache, tmp_path / f"n{i}", 2**30):
            tree = (tmp_path / f"n{i}" / "data").resolve()
            assert (tree / "shard.bin").read_bytes() == b"s" * 4096
            assert sorted(p.name for p in tree.rglob("*")) == ["other", "shard.bin", "sub"]
        assert store.gets == gets + 2, f"change {i} was handed on"
    gets = store.gets
    (tmp_path / "last").mkdir()
    with inputs.staged(message(items, "sw.last"), store, cache, tmp_path / "last", 2**30):
        pass
    assert store.gets == gets  # an unchanged tree is shared as before


def test_a_changed_tree_whose_version_the_source_no_longer_has_fails_the_attempt(tmp_path: Path) -> None:
    store = Buckets(tmp_path / "s3")
    put(tmp_path / "s3", "d", "p/x", b"one")
    items, cache = parse_spec(spec(inputs=[{"from": "s3://d/p/", "to": "data"}])).inputs, tmp_path / "cache"
    msg = message(items)
    (tmp_path / "r1").mkdir()
    with inputs.staged(msg, store, cache, tmp_path / "r1", 2**30):
        ((tmp_path / "r1" / "data").resolve() / "x").open("ab").write(b"!")
    put(tmp_path / "s3", "d", "p/x", b"two")  # the prefix moved on: version one is gone from the source
    (tmp_path / "r2").mkdir()
    with pytest.raises(PermanentError, match="was changed by a trial and the source no longer has that version"):
        with inputs.staged(msg, store, cache, tmp_path / "r2", 2**30):  # the same trial: pinned to version one
            pass
