"""Every run gets a new, empty scratch tree, removed when it ends.

Real trial processes through ``run_trial``: what one trial leaves in its
working directory, checkpoint directory, metrics file or logs must never be
seen by the next trial, and nothing of it stays on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spotsweep.services.agent.handlers import Slots
from spotsweep.shared.artifacts.checkpoints import log_key

from .conftest import Kit

# Reports what the trial found (into $SEEN, outside the tree), then leaves
# files everywhere it may write.
LOOK_AND_LITTER = """
import json, os, sys
ckpt, metrics = os.environ["SPOTSWEEP_CHECKPOINT_DIR"], os.environ["SPOTSWEEP_METRICS"]
seen = {"cwd": sorted(os.listdir(".")), "ckpt": sorted(os.listdir(ckpt)), "metrics": os.path.getsize(metrics),
        "root": os.path.dirname(os.getcwd())}
open(os.environ["SEEN"], "w").write(json.dumps(seen))
os.makedirs("data/deep", exist_ok=True)
open("data/deep/x.bin", "wb").write(b"x" * 1000)
open("model.pt", "wb").write(b"m")
open(os.path.join(ckpt, "state.pt"), "wb").write(b"s")
os.makedirs(os.path.join(os.path.dirname(ckpt), "checkpoint.uploading"), exist_ok=True)
with open(metrics, "a") as f:
    f.write(json.dumps({"step": 1, "loss": 0.5}) + "\\n")
print("noise " * 1000)
print("noise " * 1000, file=sys.stderr)
"""


def _seen(kit: Kit, out: Path) -> dict[str, object]:
    final, _ = kit.run(kit.message(LOOK_AND_LITTER, env={"SEEN": str(out)}))
    assert final.outcome == "completed", final.error
    assert final.metrics == {"loss": 0.5}
    return dict(json.loads(out.read_text()))


def test_every_run_starts_in_a_new_empty_tree_removed_when_it_ends(kit: Kit, tmp_path: Path) -> None:
    """Behaviour changed with issue 18: no tree is kept for a slot's next trial."""
    first = _seen(kit, tmp_path / "seen1.json")
    second = _seen(kit, tmp_path / "seen2.json")
    assert first == {"cwd": [], "ckpt": [], "metrics": 0, "root": first["root"]}
    assert second == {"cwd": [], "ckpt": [], "metrics": 0, "root": second["root"]}
    assert first["root"] != second["root"]  # a tree of its own, under a name no earlier run had
    assert not Path(str(first["root"])).exists() and not Path(str(second["root"])).exists()
    assert list(kit.config.workdir.iterdir()) == []


REPLACES_ITS_FOLDERS = """
import os, shutil
cwd, ckpt = os.getcwd(), os.environ["SPOTSWEEP_CHECKPOINT_DIR"]
os.chdir("..")
shutil.rmtree(cwd)
open(cwd, "w").write("not a folder any more")
shutil.rmtree(ckpt)
open(ckpt, "w").write("nor this")
"""


def test_a_trial_that_replaces_its_folders_with_files_leaves_nothing_behind(kit: Kit, tmp_path: Path) -> None:
    final, _ = kit.run(kit.message(REPLACES_ITS_FOLDERS))
    assert final.outcome == "completed", final.error
    assert list(kit.config.workdir.iterdir()) == []
    seen = _seen(kit, tmp_path / "seen.json")
    assert seen["cwd"] == [] and seen["ckpt"] == []


def test_a_throwaway_tree_is_removed(kit: Kit, tmp_path: Path) -> None:
    final, _ = kit.run(kit.message("open('out.txt', 'w').write('x')"))
    assert final.outcome == "completed", final.error
    assert list(kit.config.workdir.iterdir()) == []


LINKS_OUT = """
import os, shutil
ckpt, metrics = os.environ["SPOTSWEEP_CHECKPOINT_DIR"], os.environ["SPOTSWEEP_METRICS"]
shutil.rmtree(ckpt)
os.symlink(os.environ["OUTSIDE_DIR"], ckpt)  # checkpoints kept on a volume
os.unlink(metrics)
os.symlink(os.environ["OUTSIDE_FILE"], metrics)
os.symlink(os.environ["OUTSIDE_DIR"], "data")
"""


def test_cleaning_up_removes_links_never_what_they_point_to(kit: Kit, tmp_path: Path) -> None:
    outside = tmp_path / "volume"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "keep.pt").write_bytes(b"precious")
    (tmp_path / "notes.txt").write_text("precious")
    final, _ = kit.run(kit.message(LINKS_OUT, env={"OUTSIDE_DIR": str(outside), "OUTSIDE_FILE": str(tmp_path / "notes.txt")}))
    assert final.outcome == "completed", final.error
    assert (outside / "deep" / "keep.pt").read_bytes() == b"precious"
    assert (tmp_path / "notes.txt").read_text() == "precious"
    assert list(kit.config.workdir.iterdir()) == []  # the links were removed with the tree
    seen = _seen(kit, tmp_path / "seen.json")  # the next trial gets real, empty folders again
    assert seen["cwd"] == [] and seen["ckpt"] == []
    assert (outside / "deep" / "keep.pt").read_bytes() == b"precious"  # its litter went into a real folder


# Starts a process outside the trial's process group that writes on after the
# trial's main process has exited: to its inherited stdout, the metrics file
# it holds open, and its working directory. Handshakes through files outside
# the tree: READY (it holds the metrics file), GO (the next trial runs),
# DONE (it has written).
ESCAPES = """
import os, subprocess, sys, time
code = (
    "import json, os, time\\n"
    "metrics = open(os.environ['SPOTSWEEP_METRICS'], 'a')\\n"
    "open(os.environ['READY'], 'w').close()\\n"
    "while not os.path.exists(os.environ['GO']): time.sleep(0.01)\\n"
    "print('stray output', flush=True)\\n"
    "metrics.write(json.dumps({'step': 99, 'stray': 1.0}) + '\\\\n'); metrics.flush()\\n"
    "try:\\n"
    "    open('stray.txt', 'w').write('x')\\n"
    "finally:\\n"
    "    open(os.environ['DONE'], 'w').close()\\n"
)
subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
while not os.path.exists(os.environ["READY"]):
    time.sleep(0.01)
"""

WAITS = """
import json, os, time
open(os.environ["GO"], "w").close()
deadline = time.monotonic() + 30
while not os.path.exists(os.environ["DONE"]) and time.monotonic() < deadline:
    time.sleep(0.01)
print("own output", flush=True)
time.sleep(0.1)  # the stray's metrics line, if it had landed here, is read before the end
open(os.environ["SEEN"], "w").write(json.dumps({"cwd": sorted(os.listdir(".")), "done": os.path.exists(os.environ["DONE"])}))
"""


def test_a_process_that_left_the_trial_does_not_write_into_the_next_one(kit: Kit, tmp_path: Path) -> None:
    env = {name: str(tmp_path / name.lower()) for name in ("READY", "GO", "DONE")} | {"SEEN": str(tmp_path / "seen.json")}
    final, _ = kit.run(kit.message(ESCAPES, env=env))
    assert final.outcome == "completed", final.error
    second, _ = kit.run(kit.message(WAITS, env=env))
    assert second.outcome == "completed", second.error
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["done"]  # the stray process wrote while the second trial ran
    assert "stray" not in second.metrics
    assert seen["cwd"] == []
    stdout = kit.store.get_bytes(log_key("sw", "sw.0", 1, "stdout")).decode()
    assert "own output" in stdout and "stray output" not in stdout


def test_an_agent_removes_the_trees_of_agents_killed_outright(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names a process that no longer exists
    work = tmp_path / "work"
    stale = work / f"p{gone.pid}-sw.0-a1-abc123"
    (stale / "run").mkdir(parents=True)
    alive = work / f"p{os.getppid()}-sw.1-a1-def456"  # another agent on the node, still running
    alive.mkdir()
    unrelated = work / "notes"
    unrelated.mkdir()
    Slots(1, None).use_workdir(work)
    assert not stale.exists()
    assert alive.exists() and unrelated.exists()


def test_an_exiting_agent_removes_its_own_trees_only(tmp_path: Path) -> None:
    work = tmp_path / "work"
    mine, other = work / f"p{os.getpid()}-sw.0-a1-x", work / f"p{os.getppid()}-sw.1-a1-y"
    (mine / "run").mkdir(parents=True)
    other.mkdir()
    slots = Slots(1, None)
    slots.use_workdir(work)
    slots.remove_workspaces()
    assert not mine.exists() and other.exists()
