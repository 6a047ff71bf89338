"""Shape-preserving downsampling of learning curves, on the server.

A trial may report a million points; a browser drawing a hundred curves
needs a few hundred per curve. Largest-Triangle-Three-Buckets (Steinarsson,
"Downsampling Time Series for Visual Representation", 2013) keeps the first
and last points and, from each bucket between, the point that makes the
largest triangle with the point kept before it and the next bucket's mean:
spikes and turns survive, flat stretches thin out.

Non-finite values (a loss that turned NaN or infinite) cannot take part in
triangle areas but are what a reader looks for, so :func:`downsample` keeps them apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from spotsweep.shared import nonfinite

Point = tuple[float, float]  # (step, value)


def lttb(points: Sequence[Point], n: int) -> list[Point]:
    """At most ``n`` of ``points`` (sorted by x, finite), chosen by LTTB; the
    points themselves, in order (no new points are made up)."""
    if n <= 0:
        return []
    if len(points) <= n:
        return list(points)
    if n == 1:
        return [points[-1]]
    if n == 2:
        return [points[0], points[-1]]
    kept = [points[0]]
    every = (len(points) - 2) / (n - 2)  # the points between first and last, per bucket
    a = points[0]
    for i in range(n - 2):
        start, end = int(i * every) + 1, int((i + 1) * every) + 1
        after_start, after_end = end, min(int((i + 2) * every) + 1, len(points))
        if after_start >= after_end:  # the last bucket: the next "bucket" is the last point
            after_start, after_end = len(points) - 1, len(points)
        span = after_end - after_start
        cx = sum(p[0] for p in points[after_start:after_end]) / span
        cy = sum(p[1] for p in points[after_start:after_end]) / span
        best, best_area = start, -1.0
        ax, ay = a
        for j in range(start, end):
            bx, by = points[j]
            area = abs((ax - cx) * (by - ay) - (ax - bx) * (cy - ay))
            if area > best_area:
                best, best_area = j, area
        a = points[best]
        kept.append(a)
    kept.append(points[-1])
    return kept


def _finite(value: float | None) -> bool:
    return nonfinite.finite(value) is not None


def downsample(points: Sequence[tuple[float, float | None]], n: int) -> list[tuple[float, float | None]]:
    """At most ``n`` points of a curve sorted by step, shape kept: LTTB over
    the finite values, plus the first point of each non-finite run (at most
    a tenth of ``n``, at least one), merged back in step order."""
    if len(points) <= n:
        return list(points)
    if n <= 0:
        return []
    onsets = [p for i, p in enumerate(points) if not _finite(p[1]) and (i == 0 or _finite(points[i - 1][1]))][: max(1, n // 10)]
    finite: list[Point] = [(x, y) for x, y in points if y is not None and _finite(y)]
    merged: list[tuple[float, float | None]] = [*lttb(finite, n - len(onsets)), *onsets]
    merged.sort(key=lambda p: p[0])
    return merged
