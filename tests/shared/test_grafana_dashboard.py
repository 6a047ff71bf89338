"""deploy/grafana/spotsweep.json queries only what the services export, and shows every metric they export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from spotsweep.shared import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "spotsweep.json"


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_every_queried_metric_is_exported_and_every_exported_one_is_shown() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name for expr in queries(dashboard) for name in re.findall(r"\bspotsweep_[a-z_]+", expr)}
    assert used, "the dashboard queries nothing"
    assert used <= metrics.names(), f"not exported: {sorted(used - metrics.names())}"
    # Each metric, by its base name (a histogram's series count as one).
    base = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    exported = {re.sub(r"_(bucket|sum|count)$", "", name) for name in metrics.names()}
    assert base == exported, f"exported but not shown: {sorted(exported - base)}"


def test_panels_are_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] == "spotsweep"
    for panel in dashboard["panels"]:  # one datasource variable, chosen at import: no cluster's uid baked in
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
