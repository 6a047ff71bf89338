"""A slot's scratch tree is reused, but every trial starts in an empty one.

Real trial processes through ``run_trial``: what one trial leaves in its
working directory, checkpoint directory, metrics file or logs must never be
seen by the next trial of the same slot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from spotsweep.services.agent.workspace import Workspace

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


def _seen(kit: Kit, workspace: Workspace, out: Path) -> dict[str, object]:
    final, _ = kit.run(kit.message(LOOK_AND_LITTER, env={"SEEN": str(out)}), workspace=workspace)
    assert final.outcome == "completed", final.error
    assert final.metrics == {"loss": 0.5}
    return dict(json.loads(out.read_text()))


def test_the_next_trial_of_a_slot_starts_in_an_empty_tree(kit: Kit, tmp_path: Path) -> None:
    space = Workspace(tmp_path / "work", "slot0")
    first = _seen(kit, space, tmp_path / "seen1.json")
    second = _seen(kit, space, tmp_path / "seen2.json")
    assert first == {"cwd": [], "ckpt": [], "metrics": 0, "root": first["root"]}
    assert second == first  # the same folder, and nothing of the first trial left in it
    root = Path(str(first["root"]))
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint", "metrics.jsonl", "run", "stderr.log", "stdout.log"]
    assert all(os.path.getsize(root / f) == 0 for f in ("metrics.jsonl", "stdout.log", "stderr.log"))  # no disk held
    space.remove()
    assert not root.exists()


REPLACES_ITS_FOLDER = """
import os, shutil
os.chdir("..")
shutil.rmtree("run")
open("run", "w").write("not a folder any more")
"""


def test_a_tree_the_trial_broke_is_replaced(kit: Kit, tmp_path: Path) -> None:
    space = Workspace(tmp_path / "work", "slot0")
    final, _ = kit.run(kit.message(REPLACES_ITS_FOLDER), workspace=space)
    assert final.outcome == "completed", final.error
    seen = _seen(kit, space, tmp_path / "seen.json")
    assert seen["cwd"] == [] and seen["ckpt"] == []
    assert len(list((tmp_path / "work").iterdir())) == 1  # the broken tree is gone, not left behind


def test_a_throwaway_tree_is_removed(kit: Kit, tmp_path: Path) -> None:
    final, _ = kit.run(kit.message("open('out.txt', 'w').write('x')"))  # no workspace: one of its own
    assert final.outcome == "completed", final.error
    assert list(kit.config.workdir.iterdir()) == []
