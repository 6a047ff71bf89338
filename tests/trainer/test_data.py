"""Token files and batches: built once per node even under a race, mapped read-only, a pure function of the step."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spotsweep.trainer.data import TokenFile, TrainWindows, ValWindows, check_size, ensure_file, loader_settings
from spotsweep.trainer.errors import SetupError


RACER = """
import os, sys, time
from pathlib import Path
from spotsweep.trainer.data import ensure_file

arrivals = Path(sys.argv[3])
with open(arrivals, "a") as f:
    f.write(f"{os.getpid()}\\n")

def slow_build() -> bytes:
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\\n")
    # Every racer has arrived while the first one is still writing: the race is real, however slow they start.
    deadline = time.monotonic() + 60
    while len(arrivals.read_text().split()) < int(sys.argv[4]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return bytes(range(256)) * 64

print(ensure_file(Path(sys.argv[1]), "tokens.u8", slow_build))
"""


def test_many_trials_starting_at_once_build_the_file_once(tmp_path: Path) -> None:
    # Separate interpreters, as trials are (a forked pool would inherit the
    # test process's threads and can deadlock on a lock one of them held).
    log = tmp_path / "builds.log"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path / "data"), str(log), str(tmp_path / "arrived"),
                                "4"], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    paths = [r.communicate(timeout=120)[0].strip() for r in racers]
    assert [r.returncode for r in racers] == [0] * 4
    assert len(set(paths)) == 1
    assert len(log.read_text().split()) == 1  # built by one process; the others waited and reused it
    path = Path(paths[0])
    assert path.read_bytes() == bytes(range(256)) * 64
    assert oct(path.stat().st_mode & 0o777) == "0o444"  # read-only: shared by every trial
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken() -> bytes:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ensure_file(tmp_path, "tokens.u8", broken)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def _tokens(tmp_path: Path, size: int = 20_000) -> TokenFile:
    path = tmp_path / "t.u8"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())
    return TokenFile(path)


def test_batches_are_a_function_of_seed_and_step(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path)
    a, b = TrainWindows(tokens, 16, 8, seed=1), TrainWindows(tokens, 16, 8, seed=1)
    x, y = a[5]
    assert x.shape == (8, 16) and x.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:])  # targets are the inputs shifted by one
    assert torch.equal(b[5][0], x) and torch.equal(a[3][0], b[3][0])  # any order, any process
    assert not torch.equal(a[6][0], x)
    assert not torch.equal(TrainWindows(tokens, 16, 8, seed=2)[5][0], x)
    # every training window lies in the first 90%, every validation window in the last 10%
    cut = tokens.split()[0]
    assert int(a.high) + 17 <= cut
    val = ValWindows(tokens, 16, count=10, batch=4)
    assert len(val) == 3 and all(s >= cut for s in val.starts)


def test_the_file_is_mapped_not_copied(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path, size=1_000_000)
    _ = TrainWindows(tokens, 16, 4, seed=0)[1]
    assert isinstance(tokens.tokens, np.memmap) and tokens.tokens.mode == "r"
    assert len(pickle.dumps(tokens)) < 1000  # DataLoader workers map the file again instead of receiving it


def test_too_little_data_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match=r"t.u8 has 100 bytes; seq_len 64 needs at least"):
        check_size(_tokens(tmp_path, size=100), 64, "--data")


def test_loader_settings() -> None:
    assert loader_settings("cpu", None) == {"num_workers": 0, "pin_memory": False, "persistent_workers": False,
                                            "prefetch_factor": None, "worker_init_fn": None}
    cuda = loader_settings("cuda", None)
    assert cuda["num_workers"] == 2 and cuda["pin_memory"] and cuda["persistent_workers"]
    assert loader_settings("cpu", 3)["num_workers"] == 3
