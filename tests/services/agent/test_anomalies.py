"""The agent's anomaly flags, decided from plain events (no process, no clock)."""

from __future__ import annotations

import math

from spotsweep.services.agent.anomalies import (
    IDLE_GPU_SECONDS, Points, Sample, Silence, Watch, decide, diverged, idle_since, stalled,
)


def fold(watch: Watch, *events: object) -> Watch:
    for e in events:
        watch = decide(watch, e)  # type: ignore[arg-type]
    return watch


def test_a_healthy_run_raises_nothing() -> None:
    w = fold(Watch("loss", stall_timeout=60), *(Points(s, {"loss": 2.0 / s, "lr": 0.1}) for s in range(1, 50)),
             Silence(10), Sample(1.0, {"sys/cpu_percent": 99.0, "sys/rss_mb": 100.0}),
             Sample(400.0, {"sys/gpu_util": 95.0}))
    assert dict(w.flags) == {}


def test_nan_from_any_reported_metric_including_the_contracts_strings() -> None:
    # lines.parse_line turns "NaN"/"Infinity" into these floats before the watch sees them
    for bad in (math.nan, math.inf, -math.inf):
        w = fold(Watch("loss"), Points(1, {"loss": 1.0}), Points(2, {"grad_norm": bad}))
        assert list(w.flags) == ["nan"] and "grad_norm" in w.flags["nan"] and "step 2" in w.flags["nan"]


def test_a_non_finite_sys_value_is_not_the_trials_nan() -> None:
    assert not fold(Watch("loss"), Points(1, {"sys/gpu_util": math.nan})).flags


def test_stalled_at_half_the_stall_timeout_and_never_without_one() -> None:
    assert not stalled(29.9, 60) and stalled(30, 60) and not stalled(1e9, None)
    w = fold(Watch("loss", stall_timeout=60), Silence(10), Silence(29))
    assert not w.flags
    w = decide(w, Silence(31))
    assert list(w.flags) == ["stalled"]
    assert decide(w, Silence(1)).flags == w.flags  # it stays raised once the trial speaks again


def test_diverging_threshold() -> None:
    assert not diverged(2.0, 3.0) and diverged(2.0, 3.01)  # min: past best + 50% of |best|
    assert not diverged(0.8, 0.4, "max") and diverged(0.8, 0.39, "max")
    assert not diverged(-1.0, -0.6) and diverged(-1.0, -0.4)  # |best| for negative objectives
    assert diverged(0.0, 1e-5) and not diverged(0.0, 1e-7)  # a best of 0: the floor
    assert not diverged(1.0, math.nan) and not diverged(math.inf, 1.0)


def test_diverging_when_the_objective_rises_well_above_its_best() -> None:
    w = fold(Watch("loss"), Points(1, {"loss": 3.0}), Points(2, {"loss": 1.0}), Points(3, {"loss": 1.4}))
    assert not w.flags and w.best == 1.0  # noise: 40% above the best
    w = decide(w, Points(4, {"loss": 2.5}))
    assert list(w.flags) == ["diverging"] and "best 1" in w.flags["diverging"]


def test_diverging_follows_the_mode_and_only_the_objective() -> None:
    assert not fold(Watch("acc", mode="max"), Points(1, {"acc": 0.2}), Points(2, {"acc": 0.9})).flags
    assert list(fold(Watch("acc", mode="max"), Points(1, {"acc": 0.9}), Points(2, {"acc": 0.3})).flags) == ["diverging"]
    assert not fold(Watch("loss"), Points(1, {"other": 1.0}), Points(2, {"other": 100.0})).flags


def test_idle_gpu_after_five_minutes_under_twenty_percent_without_a_break() -> None:
    assert idle_since(None, 5.0, 19.9) == 5.0 and idle_since(5.0, 9.0, 3.0) == 5.0 and idle_since(5.0, 9.0, 20.0) is None
    samples = [Sample(t, {"sys/gpu_util": 5.0}) for t in range(0, 300, 5)]
    w = fold(Watch("loss"), *samples)
    assert not w.flags  # 295 s so far
    assert list(decide(w, Sample(IDLE_GPU_SECONDS, {"sys/gpu_util": 5.0})).flags) == ["idle_gpu"]
    broken = fold(Watch("loss"), *samples[:30], Sample(150.0, {"sys/gpu_util": 80.0}), *samples[31:],
                  Sample(300.0, {"sys/gpu_util": 5.0}))
    assert not broken.flags  # one busy sample restarts the stretch


def test_no_gpu_samples_no_idle_gpu() -> None:
    assert not fold(Watch("loss"), *(Sample(t, {"sys/cpu_percent": 0.0}) for t in range(0, 1000, 5))).flags


def test_each_flag_rises_once_and_keeps_its_first_reason() -> None:
    w = fold(Watch("loss"), Points(1, {"loss": math.nan}), Points(2, {"acc": math.inf}))
    assert list(w.flags) == ["nan"] and "'loss'" in w.flags["nan"]
