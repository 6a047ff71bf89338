"""No spotsweep module imports itself through others (imports under
``TYPE_CHECKING`` do not count): a cycle makes what works depend on which
module is imported first. ``make lint``'s acyclic_siblings contract refuses
cycles between the modules and packages of one parent; this also refuses a
package's ``__init__`` in a cycle with its own modules, which it cannot see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = {"shared": "shared", "services": "services", "trainer": "trainer"}  # setup.py's, below spotsweep/

# grimp reads the installed layout (spotsweep.shared...), which the editable install only
# provides through an import hook, so it runs in a fresh interpreter over a tree of links.
GRAPH = """
import graphlib, grimp, sys
graph = grimp.build_graph("spotsweep", exclude_type_checking_imports=True, cache_dir=None)
try:
    graphlib.TopologicalSorter({m: graph.find_modules_directly_imported_by(m) for m in graph.modules}).prepare()
except graphlib.CycleError as e:
    sys.exit("import cycle (each imports the next): " + " -> ".join(reversed(e.args[1])))
print(" ".join(sorted(graph.modules)))
"""


def test_no_module_imports_itself_through_others(tmp_path: Path) -> None:
    layout = tmp_path / "spotsweep"
    layout.mkdir()
    for entry in (ROOT / "spotsweep").iterdir():
        (layout / entry.name).symlink_to(entry)
    for name, folder in ROOTS.items():
        (layout / name).symlink_to(ROOT / folder)
    run = subprocess.run([sys.executable, "-c", GRAPH], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    modules = run.stdout.split()
    assert {"spotsweep.cli", "spotsweep.shared.spec", "spotsweep.services.planner.main", "spotsweep.trainer.loop"} <= set(modules)
