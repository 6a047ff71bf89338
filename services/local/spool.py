"""``spotsweep extend`` of a local sweep: handed to the process that runs it, through a file.

A local sweep's planner lives in the ``spotsweep run`` (or ``resume``)
process, behind an in-process broker that no other process can post to. So
a local ``extend`` writes the extension (the :class:`ExtendSweep` it would
post to RabbitMQ) as a file in ``SPOTSWEEP_HOME/runs``; the process running
the sweep takes it at its next poll and publishes it to its own planner,
and with none running the next ``resume`` takes it first. The planner
applies an extension once per spec version, so a file taken twice (the
process died between publishing and removing it) changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotsweep.services.planner.bodies import extension
from spotsweep.shared.broker.port import Outgoing


def _folder(home: Path) -> Path:
    return home / "runs"


def put(home: Path, sweep_id: str, version: int, trials: int, budget: dict[str, Any]) -> None:
    """Leave an extension of spec version ``version`` for the process that runs (or resumes) the sweep.
    One per version: the planner applies one extension of a version, so a second replaces the first."""
    folder = _folder(home)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sweep_id}.extend-v{version}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": version, "trials": trials, "budget": budget}))
    os.replace(tmp, path)  # the taker never reads half a file


def waiting(home: Path, sweep_id: str) -> list[Path]:
    """The extensions of ``sweep_id`` not taken yet, oldest version first."""
    return sorted(_folder(home).glob(f"{sweep_id}.extend-v*.json"),
                  key=lambda p: int(p.name.rsplit("-v", 1)[1].removesuffix(".json")))


def take(home: Path, sweep_id: str, publish: Callable[[Outgoing], None]) -> int:
    """Publish the waiting extensions as ``spotsweep extend`` posts them to a cluster's planner,
    each file removed once published; returns how many."""
    paths = waiting(home, sweep_id)
    for path in paths:
        data = json.loads(path.read_text())
        publish(extension(sweep_id, int(data["version"]), int(data["trials"]), dict(data["budget"])))
        path.unlink()
    return len(paths)
