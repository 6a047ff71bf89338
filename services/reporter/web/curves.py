"""Learning curves as the charts draw them: by step, by time or by tokens.

One answer serves the three x axes: each trial's points are downsampled by
step (:mod:`.downsample`) and come with, point for point, the wall-clock
seconds since the trial's first start (when the collector recorded the
point; a preempted trial's wait for its next attempt is in there, as on a
wall clock) and, when the sweep reports a tokens metric, its value at the
same step (``None`` where that step has none). Time and tokens grow with
the step, so the step's downsampling keeps the shape on their axes too.
Pure functions: the rows come from :func:`.queries.curves`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from spotsweep.services.reporter.web.downsample import downsample

# A metric counts the tokens seen when its name, or its last ``/`` part, is one of these (first found wins).
TOKEN_NAMES = ("tokens", "tokens_seen", "num_tokens", "total_tokens", "tokens_processed")

Row = tuple[int, Any, int, datetime]  # (step, value, attempt, recorded_at), by step


def tokens_metric(names: Sequence[str]) -> str | None:
    """The sweep's tokens metric among ``names``: the first of :data:`TOKEN_NAMES`
    reported as such, else one whose last ``/`` part is one (``train/tokens``), else None."""
    for wanted in TOKEN_NAMES:
        if wanted in names:
            return wanted
    for wanted in TOKEN_NAMES:
        found = sorted(n for n in names if n.rsplit("/", 1)[-1] == wanted)
        if found:
            return found[0]
    return None


def trial_curve(rows: Sequence[Row], start: datetime | None, tokens: dict[int, Any] | None,
                max_points: int) -> dict[str, Any]:
    """One trial's curve: ``points`` ([step, value], at most ``max_points``),
    ``seconds`` and ``tokens`` beside them (``tokens`` only when the sweep has a
    tokens metric), and ``resumes``: [step, attempt, seconds, tokens] where a
    next attempt took over."""
    origin = start or (min(r[3] for r in rows) if rows else None)

    def seconds(at: datetime) -> float:
        return max(0.0, (at - origin).total_seconds()) if origin is not None else 0.0

    when = {step: at for step, _, _, at in rows}
    kept = downsample([(step, value) for step, value, _, _ in rows], max_points)
    out: dict[str, Any] = {"points": [[step, value] for step, value in kept],
                           "seconds": [round(seconds(when[int(step)]), 3) for step, _ in kept]}
    resumes = [(step, attempt, at) for i, (step, _, attempt, at) in enumerate(rows) if i and attempt != rows[i - 1][2]]
    if tokens is not None:
        out["tokens"] = [tokens.get(int(step)) for step, _ in kept]
    out["resumes"] = [[step, attempt, round(seconds(at), 3), None if tokens is None else tokens.get(step)]
                      for step, attempt, at in resumes]
    return out
