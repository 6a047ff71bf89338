"""The agent's side of a sweep's workdir: fetched once per hash, checked, unpacked safely, copied per run.

The same path over moto's S3 with real services is in tests/integration/test_workdir.py.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from spotsweep.services.agent import code_cache
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared import codepack
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.messages import TrialMessage


def hand_made(store: LocalArtifactStore, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    """A .tar.gz built member by member (as an attacker would), stored under its true hash."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    sha = hashlib.sha256(out.getvalue()).hexdigest()
    store.put_bytes(codepack.code_key(sha), out.getvalue())
    return sha


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def published(store: LocalArtifactStore, root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return codepack.publish(store, root, codepack.MiB).sha256


class CountingStore(LocalArtifactStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = 0

    def get_file(self, key: str, path: Path) -> None:
        self.gets += 1
        super().get_file(key, path)


def test_fetched_once_per_hash_and_each_run_gets_its_own_copy(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    sha = published(store, tmp_path / "w", {"train.py": "print(1)\n", "lib/a.txt": "a"})
    cache = tmp_path / "cache"
    runs = [tmp_path / f"run{i}" for i in range(3)]
    for run in runs:
        run.mkdir()
    threads = [threading.Thread(target=code_cache.working_dir, args=(store, cache, sha, None, run)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.gets == 1
    assert [p.name for p in cache.iterdir()] == [sha]  # no temporary folder left behind
    (runs[0] / "lib" / "a.txt").write_text("changed by trial 0")
    assert (runs[1] / "lib" / "a.txt").read_text() == "a" and (cache / sha / "lib" / "a.txt").read_text() == "a"


def test_without_a_hash_a_run_is_in_its_own_folder_or_local_modes_workdir(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    assert code_cache.working_dir(store, tmp_path / "c", None, None, tmp_path / "run") == tmp_path / "run"
    assert code_cache.working_dir(store, tmp_path / "c", None, tmp_path / "w", tmp_path / "run") == tmp_path / "w"


@pytest.mark.parametrize(("members", "why"), [
    ([(member("../evil"), b"x")], r"'../evil' is a path leading out of the folder"),
    ([(member("ok/../../evil"), b"x")], r"'ok/\.\./\.\./evil' is a path leading out"),
    ([(member("/etc/evil"), b"x")], r"'/etc/evil' is an absolute path"),
    ([(member("link", tarfile.SYMTYPE, "/etc/passwd"), b"")], r"'link' is a link to '/etc/passwd', outside"),
    ([(member("a/link", tarfile.SYMTYPE, "../../x"), b"")], r"'a/link' is a link to '../../x', outside"),
    ([(member("hard", tarfile.LNKTYPE, "/etc/passwd"), b"")], r"'hard' is a hard link to '/etc/passwd', outside"),
    ([(member("dev", tarfile.CHRTYPE), b"")], r"'dev' is a device or FIFO"),
    ([(member("fifo", tarfile.FIFOTYPE), b"")], r"'fifo' is a device or FIFO"),
])
def test_hostile_archives_are_refused_and_nothing_is_written(tmp_path: Path, members: list[Any], why: str) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    sha = hand_made(store, [(member("train.py"), b"print(1)"), *members])
    cache = tmp_path / "cache"
    with pytest.raises(PermanentError, match=f"code archive code/{sha}.tar.gz is refused: {why}"):
        code_cache.fetch(store, cache, sha)
    assert list(cache.iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_a_missing_or_corrupt_archive_is_permanent(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    missing = "0" * 64
    with pytest.raises(PermanentError, match=f"code/{missing}.tar.gz is not in the artifact store"):
        code_cache.fetch(store, tmp_path / "c", missing)
    store.put_bytes(codepack.code_key(missing), b"not what the name says")
    with pytest.raises(PermanentError, match="is corrupt: its sha256 is"):
        code_cache.fetch(store, tmp_path / "c", missing)
    garbage = b"\x1f\x8b not really gzip"
    sha = hashlib.sha256(garbage).hexdigest()
    store.put_bytes(codepack.code_key(sha), garbage)
    with pytest.raises(PermanentError, match="cannot be unpacked"):
        code_cache.fetch(store, tmp_path / "c", sha)


def message(sha: str | None, argv: list[str]) -> TrialMessage:
    return TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={}, argv=argv,
                        metric="loss", workdir_sha256=sha)


def test_trial_runs_in_the_archive_and_relative_programs_resolve_there(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    root = tmp_path / "w"
    sha = published(store, root, {"train.py": "from spotsweep import trial\ntrial.report(1, loss=float(open('v.txt').read()))\n",
                                  "v.txt": "0.25", "run.sh": "#!/bin/sh\nexec python train.py\n"})
    (root / "run.sh").chmod(0o755)
    sha = codepack.publish(store, root, codepack.MiB).sha256  # again: the mode is in the archive
    config = RunnerConfig(agent_id="a", workdir=tmp_path / "work")
    for argv in (["python", "train.py"], ["./run.sh"]):
        final = run_trial(message(sha, argv), store, lambda e: None, config, RunControls())
        assert final is not None and final.outcome == "completed", final
        assert final.metrics == {"loss": 0.25}


def test_a_bad_archive_fails_the_attempt_with_the_reason_and_an_unreachable_store_requeues(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    sha = hand_made(store, [(member("../evil"), b"x")])
    config = RunnerConfig(agent_id="a", workdir=tmp_path / "work")
    final = run_trial(message(sha, ["python", "train.py"]), store, lambda e: None, config, RunControls())
    assert final is not None and final.outcome == "failed" and final.failure == "refused"  # never the node's fault
    assert final.error is not None and "cannot be set up, so the attempt did not start" in final.error
    assert "'../evil' is a path leading out of the folder" in final.error

    class Away(LocalArtifactStore):
        def get_file(self, key: str, path: Path) -> None:
            raise RetryableError("S3 unreachable")

    with pytest.raises(RetryableError):
        run_trial(message("1" * 64, ["python", "train.py"]), Away(tmp_path / "s2"), lambda e: None, config,
                  RunControls())


def test_the_cache_keeps_the_recently_used_trees_and_deletes_the_rest(tmp_path: Path) -> None:
    import os
    import time

    cache = tmp_path / "cache"
    now = time.time()
    for i in range(12):  # tree i was last used i hours ago; trees 10 and 11 a minute ago
        (cache / f"t{i:02d}").mkdir(parents=True)
        age = 60 if i >= 10 else 3600 * i
        os.utime(cache / f"t{i:02d}", (now - age, now - age))
    (cache / ".t99-crashed").mkdir()  # a killed agent's half-made tree
    os.utime(cache / ".t99-crashed", (now - 7200, now - 7200))
    deleted = code_cache.evict(cache, spare="t09", keep=4, now=now)
    # kept: the 4 most recently used (t10, t11, t00, t01) and the spared t09; t02-t08, unused for hours, and the
    # crashed folder go
    assert deleted == [".t99-crashed", *[f"t{i:02d}" for i in range(2, 9)]]
    assert sorted(p.name for p in cache.iterdir()) == ["t00", "t01", "t09", "t10", "t11"]


def test_a_new_tree_evicts_old_ones_and_a_used_one_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(code_cache, "KEEP_TREES", 1)
    store = LocalArtifactStore(tmp_path / "store")
    cache = tmp_path / "cache"
    old = published(store, tmp_path / "a", {"train.py": "print('a')\n"})
    code_cache.fetch(store, cache, old)
    os.utime(cache / old, (1, 1))  # unused for decades
    new = published(store, tmp_path / "b", {"train.py": "print('b')\n"})
    code_cache.fetch(store, cache, new)
    assert [p.name for p in cache.iterdir()] == [new]
    code_cache.fetch(store, cache, old)  # needed again: fetched again
    assert sorted(p.name for p in cache.iterdir()) == sorted([old, new])  # new was used just now: kept


def test_the_code_cache_is_the_agents_alone_an_older_agents_open_one_too(tmp_path: Path) -> None:
    """Issue 39, item 6: a trial reads its run's copy of its code, never another sweep's tree in the cache."""
    store = LocalArtifactStore(tmp_path / "store")
    (tmp_path / "src").mkdir()
    sha = published(store, tmp_path / "src", {"train.py": "print('secret')\n"})
    cache = tmp_path / "cache"
    code_cache.fetch(store, cache, sha)
    assert cache.stat().st_mode & 0o777 == 0o700
    cache.chmod(0o755)  # as an agent before issue 39 left it
    code_cache.fetch(store, cache, sha)  # a hit: nothing fetched, the cache closed all the same
    assert cache.stat().st_mode & 0o777 == 0o700
