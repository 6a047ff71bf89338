"""Hostile code archives through the real services: a gzip bomb and a link chain that leads out.

Anyone who can post a spec and write to the store can name a hand-made archive by its hash
(``workdir_sha256``); ``submit``'s size limit never sees it. The agent must refuse it while
unpacking, with the reason in the trial's error and failure kind ``refused`` (bad input, not
a broken node), without the bomb landing on its disk, and go on serving: a clean sweep
submitted right after completes on the same agent.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hostile import Hostile, bystander_spec

from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.codepack import code_key
from spotsweep.shared.settings import Settings

pytestmark = pytest.mark.integration
MiB = 1 << 20


def stored(hostile: Hostile, members: list[tuple[str, bytes | str]]) -> str:
    """A .tar.gz of ``(name, data)`` (str: a symbolic link's target) in the cluster's store under its hash."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=9) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    body = out.getvalue()
    sha = hashlib.sha256(body).hexdigest()
    env = hostile.cluster.env
    store = S3ArtifactStore.from_settings(Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v
                                                      for k, v in env.items() if k.startswith("SPOTSWEEP_S3_")}))
    store.put_bytes(code_key(sha), body)
    return sha


def run_refused(hostile: Hostile, name: str, sha: str) -> dict[str, Any]:
    spec = {**bystander_spec(), "name": name, "space": {"x": [0]}, "workdir_sha256": sha,
            "retries": {"max_failures": 0}}
    sweep_id = hostile.submit(spec)
    assert hostile.wait_sweep(sweep_id, timeout=90) in ("failed", "completed"), hostile.cluster.logs()
    [row] = hostile.trials(sweep_id)
    assert row["state"] == "failed", row
    failures = hostile.sql("SELECT failure FROM trial_journal WHERE sweep_id = %s AND kind = 'trial.finished'", sweep_id)
    assert failures == [("refused",)], failures  # a refusal of bad input, which no node breaker may count
    return row


def tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_gzip_bomb_is_refused_while_unpacking_and_never_lands(hostile: Hostile) -> None:
    zeros = b"\0" * (100 * MiB)
    sha = stored(hostile, [("train.py", b"print(1)\n"), *((f"zeros{i}", zeros) for i in range(3))])
    row = run_refused(hostile, "bomb", sha)
    assert f"code archive code/{sha}.tar.gz is refused" in row["error"], row["error"]
    assert "a ratio over 200" in row["error"] or "more than 100 MiB" in row["error"], row["error"]
    assert tree_bytes(hostile.tmp / "agent") < 40 * MiB  # 300 MiB before; at most the ratio's first 16 MiB or so
    hostile.assert_clean_sweep_completes()


def test_a_link_chain_that_resolves_outside_is_refused(hostile: Hostile) -> None:
    # z -> . and b -> z/.. : each harmless as text, together b is the tree's parent; b/escape would land beside it
    sha = stored(hostile, [("b", "z/.."), ("z", "."), ("b/escape", b"x")])
    row = run_refused(hostile, "chain", sha)
    assert "'b/escape' is inside a folder that resolves outside the tree" in row["error"], row["error"]
    assert not list((hostile.tmp / "agent").rglob("escape"))
    hostile.assert_clean_sweep_completes()
