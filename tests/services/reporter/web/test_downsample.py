"""LTTB keeps a curve's shape in a bounded number of points; non-finite values survive."""

from __future__ import annotations

import math

from spotsweep.services.reporter.web.downsample import downsample, lttb


def test_short_curves_come_back_whole() -> None:
    points = [(float(i), float(i * i)) for i in range(10)]
    assert lttb(points, 10) == points
    assert downsample(points, 50) == points


def test_at_most_n_points_the_ends_kept_and_all_of_them_real_points() -> None:
    points = [(float(i), math.sin(i / 50)) for i in range(10_000)]
    for n in (2, 3, 10, 500):
        kept = lttb(points, n)
        assert len(kept) == n
        assert kept[0] == points[0] and kept[-1] == points[-1]
        assert set(kept) <= set(points)
        assert [p[0] for p in kept] == sorted(p[0] for p in kept)


def test_a_spike_survives_where_every_kth_point_would_lose_it() -> None:
    points = [(float(i), 1.0) for i in range(10_000)]
    points[4321] = (4321.0, 50.0)
    kept = lttb(points, 100)
    assert (4321.0, 50.0) in kept
    assert (4321.0, 50.0) not in points[::100]


def test_a_curve_that_turns_nan_keeps_its_first_nan_within_the_bound() -> None:
    points: list[tuple[float, float | None]] = [(float(i), 1.0 / (1 + i)) for i in range(5000)]
    points += [(float(i), float("nan")) for i in range(5000, 8000)]
    kept = downsample(points, 200)
    assert len(kept) <= 200
    assert (5000.0, points[5000][1]) in kept or any(s == 5000.0 and math.isnan(v) for s, v in kept if v is not None)
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)
    assert sum(1 for _, v in kept if v is None or not math.isfinite(v)) == 1  # one onset, not 3000 NaNs


def test_zero_points_asked_gives_none() -> None:
    assert downsample([(0.0, 1.0), (1.0, 2.0)], 0) == []
