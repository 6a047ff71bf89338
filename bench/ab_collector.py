"""Before/after of the collector's write path: ``write_events`` of a git
revision against the working tree's, alternating in one database, so the
machine's noise hits both alike. Same events as ``bench/ingest.py``.

    python bench/ab_collector.py --rev 4b1ce38 --repeat 3
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import ingest

from spotsweep.services.collector.handlers import write_events
from spotsweep.shared import log
from spotsweep.shared.db import Database


def load_at(rev: str) -> object:
    """``write_events`` as it was at ``rev``."""
    src = subprocess.run(["git", "show", f"{rev}:services/collector/handlers.py"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent).stdout
    path = Path(tempfile.mkdtemp()) / "collector_at_rev.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("collector_at_rev", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["collector_at_rev"] = mod
    spec.loader.exec_module(mod)
    return mod.write_events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", required=True, help="the 'before' revision")
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    log.configure("WARNING")
    fns = {"before": load_at(args.rev), "after": write_events}
    res: dict[str, list[float]] = {"before": [], "after": []}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    with harness.services() as svc:
        db = Database(svc.database("ab"))
        db.migrate()
        for rep in range(args.repeat):
            for label, fn in fns.items():
                evs = ingest.events(args.points, 100, f"{label}{rep}")
                t, c = time.perf_counter(), time.process_time()
                for i in range(0, len(evs), 50):
                    fn(evs[i:i + 50], db)  # type: ignore[operator]
                res[label].append(args.points / (time.perf_counter() - t))
                cpu[label].append((time.process_time() - c) / args.points * 1e6)
        db.close()
    rows = [[label, harness.summary(v)["median"], f"{min(v):,.0f}-{max(v):,.0f}", statistics.median(cpu[label])]
            for label, v in res.items()]
    print(harness.table(f"collector write path, {args.rev} vs working tree, {args.repeat} alternating runs",
                        ["version", "points/s", "range", "client CPU us/point"], rows))
    ratio = statistics.median(res["after"]) / statistics.median(res["before"])
    print(f"ratio after/before (medians): {ratio:.2f}x")
    harness.write_json("ab_collector", {"args": vars(args) | {"json": str(args.json)}, "points_per_s": res,
                                        "cpu_us_per_point": cpu, "ratio": ratio}, args.json)


if __name__ == "__main__":
    main()
