"""A root trial in process mode cannot change a staged input (issue 40): the real runner, real child processes.

The tests run as root, and the runner with no ``--trial-user`` runs each trial as root, as local mode as root
and ``--allow-root-trials`` do. The same through the real services: tests/integration/test_inputs_immutable.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from spotsweep.services.agent import ro_mount
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.messages import TrialMessage
from spotsweep.shared.spec import parse_spec
from tests.services.agent.test_inputs import Buckets, put

pytestmark = pytest.mark.skipif(not ro_mount.allowed(), reason="a mount namespace needs CAP_SYS_ADMIN (root)")

TRIAL = r"""
import errno, hashlib, json, os
digest = hashlib.sha256(open("data/shard.bin", "rb").read()).hexdigest()
try:
    with open("data/shard.bin", "ab") as f:
        f.write(b"oops!!")
    error = 0
except OSError as e:
    error = e.errno
with open(os.environ["SPOTSWEEP_METRICS"], "a") as out:
    out.write(json.dumps({"step": 1, "match": float(digest == os.environ["EXPECT"]), "errno": error,
                          "uid": os.getuid()}) + "\n")
"""


def test_a_root_trials_append_fails_read_only_and_the_next_trial_reads_the_staged_bytes(tmp_path: Path) -> None:
    shard = os.urandom(1 << 20)
    put(tmp_path / "s3", "d", "corpus/shard.bin", shard)
    store, config = Buckets(tmp_path / "s3"), RunnerConfig(agent_id="a", workdir=tmp_path / "work")
    items = parse_spec({"name": "s", "command": "python t.py", "metric": {"name": "match", "mode": "max"},
                        "inputs": [{"from": "s3://d/corpus/", "to": "data"}]}).inputs
    finals = []
    for i in range(2):
        msg = TrialMessage(sweep_id="sw", trial_id=f"sw.{i}", attempt=1, trial_name=f"t{i}", index=i, params={},
                           argv=["python", "-c", TRIAL], metric="match", inputs=items,
                           env={"EXPECT": hashlib.sha256(shard).hexdigest()})
        finals.append(run_trial(msg, store, lambda e: None, config, RunControls()))
    for final in finals:
        assert final is not None and final.outcome == "completed", final
        assert final.metrics == {"match": 1.0, "errno": float(errno.EROFS), "uid": 0.0}, final.metrics
    [tree] = [p for p in (tmp_path / "work" / "inputs").iterdir() if not p.name.startswith(".")]
    assert (tree / "shard.bin").read_bytes() == shard
    assert store.gets == 1  # staged once: nothing changed it
    with open("/proc/self/mountinfo") as f:
        assert str(tree) not in f.read()  # the read-only mount was the trial's alone


def test_where_the_namespace_cannot_be_made_the_trial_runs_and_a_changed_tree_is_staged_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A root agent without CAP_SYS_ADMIN (in an unprivileged container): the append goes through, the next
    trial to link the tree gets it staged again."""
    monkeypatch.setattr(ro_mount, "read_only", lambda trees: (_ for _ in ()).throw(OSError(errno.EPERM, "no")))
    shard = os.urandom(1 << 16)
    put(tmp_path / "s3", "d", "corpus/shard.bin", shard)
    store, config = Buckets(tmp_path / "s3"), RunnerConfig(agent_id="a", workdir=tmp_path / "work")
    items = parse_spec({"name": "s", "command": "python t.py", "metric": {"name": "match", "mode": "max"},
                        "inputs": [{"from": "s3://d/corpus/", "to": "data"}]}).inputs
    finals = []
    for i in range(2):
        msg = TrialMessage(sweep_id="sw", trial_id=f"sw.{i}", attempt=1, trial_name=f"t{i}", index=i, params={},
                           argv=["python", "-c", TRIAL], metric="match", inputs=items,
                           env={"EXPECT": hashlib.sha256(shard).hexdigest()})
        finals.append(run_trial(msg, store, lambda e: None, config, RunControls()))
    assert [json.dumps(f.metrics, sort_keys=True) for f in finals if f is not None] == [
        json.dumps({"errno": 0.0, "match": 1.0, "uid": 0.0}, sort_keys=True)] * 2  # each read the staged bytes
    assert store.gets == 2  # the first trial's append was seen: staged again for the second
