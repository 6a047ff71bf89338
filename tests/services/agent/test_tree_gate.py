"""Per-sweep privacy on a node (issue 39, item 6): each staged input tree behind a gate of its own, passed only by a
trial started with that tree's gid. tests/hostile/test_sweep_privacy.py runs the same through the real services."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from spotsweep.services.agent import tree_gate
from spotsweep.services.agent.container import Mounts, Request, Runtime
from spotsweep.services.agent.trial_user import TrialUser
from tests.integration.test_inputs_s3 import USER, _ensure_user

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="gates are made by an agent running as root")


def test_a_trees_gid_is_its_hash_place_in_the_range_and_never_one_taken() -> None:
    gid = tree_gate.gate_gid("a" * 32, set())
    assert tree_gate.is_gate(gid) and gid == tree_gate.gate_gid("a" * 32, {1, 2})
    assert tree_gate.gate_gid("b" * 32, set()) != gid
    assert tree_gate.gate_gid("a" * 32, {gid}) == gid + 1 or gid == tree_gate.BASE + tree_gate.SPAN - 1
    assert not tree_gate.is_gate(0) and not tree_gate.is_gate(65534) and not tree_gate.is_gate(tree_gate.BASE - 1)
    env = tree_gate.gate_gid("a" * 32, set(), tree_gate.ENVS)  # setup.pip envs: a lane of their own, never an input's
    assert env == gid + tree_gate.SPAN and tree_gate.is_gate(env) and not tree_gate.is_gate(tree_gate.ENVS + tree_gate.SPAN)


def _staged(cache: Path, name: str, text: str) -> Path:
    staging = cache / f".{name}-x" / "tree"
    staging.mkdir(parents=True)
    (staging / "secret.txt").write_text(text)
    (staging / "secret.txt").chmod(0o444)
    staging.chmod(0o555)
    tree_gate.place(cache, staging, cache / name)
    return cache / name


@root_only
def test_placed_trees_are_gated_each_with_a_gid_of_its_own(tmp_path: Path) -> None:
    a = _staged(tmp_path, "a" * 32, "A")
    squatter = tmp_path / "c"  # a gate already in the cache at the gid b's hash would give it
    squatter.mkdir()
    os.chown(squatter, 0, tree_gate.gate_gid("b" * 32, set()))
    b = _staged(tmp_path, "b" * 32, "B")
    gids = {p.stat().st_gid for p in (a, b, squatter)}
    assert len(gids) == 3 and all(tree_gate.is_gate(g) for g in gids)
    assert stat.S_IMODE(a.stat().st_mode) == 0o750 and a.stat().st_uid == 0
    assert (a / "secret.txt").read_text() == "A" and not (tmp_path / ".a-x" / "tree").exists()
    assert tree_gate.groups([a, b, a, tmp_path]) == (a.stat().st_gid, b.stat().st_gid)  # tmp_path: not a gate


@root_only
def test_a_tree_staged_before_gates_is_gated_when_next_used(tmp_path: Path) -> None:
    old = tmp_path / ("d" * 32)
    old.mkdir(mode=0o555)
    assert tree_gate.groups([old]) == ()  # root's group: never given to a trial
    tree_gate.ensure(tmp_path, old)
    assert tree_gate.is_gate(old.stat().st_gid) and stat.S_IMODE(old.stat().st_mode) == 0o750


@root_only
def test_a_gid_the_kernel_refuses_leaves_the_tree_as_it_was_and_staged(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(tree_gate.os, "chown", refused)  # root in a user namespace that does not map the gid
    tree = _staged(tmp_path, "e" * 32, "E")
    assert stat.S_IMODE(tree.stat().st_mode) == 0o555 and (tree / "secret.txt").read_text() == "E"


@root_only
def test_a_trial_user_reads_the_trees_it_was_given_and_not_another_even_by_path() -> None:
    _ensure_user()
    with tempfile.TemporaryDirectory() as tmp:  # under /tmp: pytest's tmp_path is under a 0700 folder
        os.chmod(tmp, 0o755)
        cache = Path(tmp) / "inputs"
        cache.mkdir(mode=0o711)
        _as_trial_user(cache)


def _as_trial_user(cache: Path) -> None:
    a, b = _staged(cache, "a" * 32, "A"), _staged(cache, "b" * 32, "B")
    probe = ("import os, sys\nfor p in sys.argv[2:]:\n    try:\n        print(open(p).read(), end='')\n"
             "    except OSError:\n        print('-', end='')\ntry:\n    os.listdir(sys.argv[1])\n"
             "    print('L')\nexcept OSError:\n    print('')")
    entry = __import__("pwd").getpwnam(USER)
    user = TrialUser(USER, entry.pw_uid, entry.pw_gid, "/", tree_gate.groups([b]))
    seen = subprocess.run(["/usr/bin/python3", "-c", probe, str(cache), str(b / "secret.txt"), str(a / "secret.txt")],
                          capture_output=True, text=True, check=True, **user.popen()).stdout
    assert seen == "B-\n"  # its own tree read; the other's refused; the cache not listed


def test_a_container_gets_its_trees_gates_as_supplementary_groups() -> None:
    runtime = Runtime("/usr/bin/docker", None, "/work")
    args = runtime.command("c", Request("img:1", user=(1001, 1001), groups=(tree_gate.BASE + 5,)), ["python3"],
                           Path("/w/r/run"), {}, Mounts.of(Path("/w/r"), Path("/w/r/run"), []))
    assert f"--group-add={tree_gate.BASE + 5}" in args and "--user" in args
    assert not [a for a in Runtime("/usr/bin/docker", None, "/work").command(
        "c", Request("img:1"), ["python3"], Path("/w/r/run"), {}, Mounts.of(Path("/w/r"), Path("/w/r/run"), []))
        if a.startswith("--group-add")]


def test_the_trial_users_popen_carries_its_gates_only() -> None:
    assert TrialUser("t", 5, 6, "/").popen() == {"user": 5, "group": 6, "extra_groups": []}
    assert TrialUser("t", 5, 6, "/", (7,)).popen()["extra_groups"] == [7]
