"""PBT's lineage in the report: one line per trial, its segments in order.

``m3: 0-2 · 2-4 from m2@2, lr 0.1→0.4 · 4-6`` reads: m3 trained to step 2 on its
own, then continued from m2's checkpoint at step 2 with lr changed, then on
its own to 6. From the view ``trial_segments`` (docs/results.md); a sweep of
another strategy has no rows and gets no lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from spotsweep.services.reporter.safe import shown
from spotsweep.shared.db import Conn

LINEAGE_TRIALS = 20  # trials given a lineage line (the best first)


def segments(conn: Conn, sweep_id: str) -> dict[str, list[dict[str, Any]]]:
    """Each trial's segments, in order, by trial id."""
    rows = conn.execute("SELECT trial_id, segment, start_step, end_step, params, from_trial_name, from_step"
                        " FROM trial_segments WHERE sweep_id = %s ORDER BY trial_id, segment", (sweep_id,)).fetchall()
    return {trial_id: list(group) for trial_id, group in itertools.groupby(rows, key=lambda r: r["trial_id"])}


def line(name: str, segs: Sequence[dict[str, Any]]) -> str:
    """One trial's lineage (see the module)."""
    parts = []
    prev: dict[str, Any] | None = None
    for s in segs:
        text = f"{s['start_step']}-{s['end_step']}"
        if s["from_trial_name"] is not None:
            text += f" from {shown(s['from_trial_name'])}" + (f"@{s['from_step']}" if s["from_step"] is not None else "")
        if prev is not None:
            changed = [f"{shown(k)} {shown(prev['params'].get(k))}→{shown(v)}" for k, v in s["params"].items()
                       if prev["params"].get(k) != v and not (v == s["end_step"] and prev["params"].get(k) == prev["end_step"])]
            text += "".join(f", {c}" for c in changed)
        parts.append(text)
        prev = s
    return f"{shown(name)}: " + " · ".join(parts)


def lines(rows: Sequence[dict[str, Any]], by_trial: dict[str, list[dict[str, Any]]], most: int = LINEAGE_TRIALS) -> list[str]:
    """Lineage lines of ``rows`` (trial rows, in the report's order) that have segments."""
    return [line(r["trial_name"], by_trial[r["trial_id"]]) for r in rows if r["trial_id"] in by_trial][:most]
