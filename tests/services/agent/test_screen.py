"""The spec's limits over a trial's lines, without processes: what gets through, what is counted."""

from __future__ import annotations

import math

from spotsweep.services.agent.lines import BadLine, Checkpoint, Heartbeat, Points
from spotsweep.services.agent.screen import Screen
from spotsweep.shared.limits import Limits


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_good_lines_get_through_and_nothing_is_flagged() -> None:
    screen = Screen(Limits())
    assert screen.admit(1, '{"step": 1, "loss": 0.5}') == Points(1, {"loss": 0.5})
    assert screen.admit(2, '{"checkpoint": 1}') == Checkpoint(1)
    assert screen.admit(3, '{"heartbeat": 1}') == Heartbeat()
    assert screen.flags({"loss": 0.5}) == [] and screen.warnings() == []


def test_bad_metric_names_skip_the_line_and_say_why_once_per_kind() -> None:
    screen = Screen(Limits())
    long = "n" * 10_485_760
    assert screen.admit(7, '{"step": 1, "%s": 1}' % long) is None
    assert screen.admit(8, '{"step": 2, "%s": 1}' % long) is None
    assert screen.admit(9, '{"step": 3, "a\\u0000b": 1}') is None
    assert screen.admit(10, '{"step": 4, "": 1}') is None
    assert screen.admit(11, '{"step": 5, "ok": 1}') == Points(5, {"ok": 1.0})
    assert screen.flags() == ["skipped_lines"]
    long_names, control, empty = screen.warnings()
    assert long_names.startswith("skipped 2 lines: metric name is 10485760 characters long (limit 200)")
    assert long_names.endswith("(first at line 7)") and len(long_names) <= 300
    assert control == "skipped 1 line: metric name holds a control character: 'a\\x00b' (first at line 9)"
    assert empty == "skipped 1 line: metric name is empty (first at line 10)"


def test_the_kinds_of_problem_counted_stay_bounded() -> None:
    screen = Screen(Limits())
    for i in range(1000):
        assert screen.admit(i + 1, '{"step": 1, "m": "v%d"}' % i) is None  # "metric 'm' is not a number: 'v0'"...
        assert screen.admit(i + 1, '{"step": 1, "m%d": []}' % i) is None  # a new name each time
    assert screen.skipped == 2000 and len(screen._skips) <= 21
    assert len(screen.warnings()) <= 20


def test_a_name_with_a_control_character_is_refused() -> None:
    screen = Screen(Limits())
    assert screen.admit(1, '{"step": 1, "a\\u001b[2Jb": 1}') is None
    assert "control character" in screen.warnings()[0]


def test_past_the_distinct_name_limit_new_names_are_skipped_known_ones_pass() -> None:
    screen = Screen(Limits(metric_names=3), known=["restored"])
    assert screen.admit(1, '{"step": 1, "a": 1, "b": 2}') is not None
    assert screen.admit(2, '{"step": 2, "c": 1}') is None  # a fourth name
    assert screen.admit(3, '{"step": 3, "a": 1, "restored": 2}') is not None
    assert screen.skipped == 1
    assert "would make 4 distinct names (limits.metric_names = 3)" in screen.warnings()[0]


def test_the_rate_is_a_token_bucket_and_checkpoints_are_exempt() -> None:
    clock = Clock()
    screen = Screen(Limits(lines_per_second=10.0, line_burst=5), clock=clock)
    passed = [screen.admit(i, '{"step": %d, "a": 1}' % i) is not None for i in range(8)]
    assert passed == [True] * 5 + [False] * 3
    assert screen.admit(9, '{"checkpoint": 3}') == Checkpoint(3)  # never rate-limited
    clock.now = 0.25  # 2.5 tokens back
    assert [screen.admit(i, '{"step": 1, "a": 1}') is not None for i in range(3)] == [True, True, False]
    assert screen.flags() == ["rate_limited"]
    assert screen.warnings()[0].startswith("skipped 4 lines: over 10 lines a second after a burst of 5")


def test_over_long_and_invalid_lines_are_counted() -> None:
    screen = Screen(Limits())
    assert screen.admit(1, BadLine("xxx", "line is longer than 1048576 bytes (limits.line_bytes)")) is None
    assert screen.admit(2, "not json") is None
    assert screen.admit(3, "not json either") is None
    assert screen.warnings() == [
        "skipped 1 line: line is longer than 1048576 bytes (limits.line_bytes) (first at line 1)",
        "skipped 2 lines: not JSON: Expecting value (first at line 2)",
    ]


def test_non_finite_final_metrics_raise_the_nan_flag_and_notes_join_in() -> None:
    screen = Screen(Limits())
    screen.note("log_truncated", "logs cut")
    screen.note("log_truncated", "said once")
    assert screen.flags({"loss": math.nan}) == ["log_truncated", "nan"]
    assert screen.flags({"loss": -math.inf}) == ["log_truncated", "nan"]
    assert screen.warnings() == ["logs cut"]


def test_warnings_are_bounded() -> None:
    screen = Screen(Limits())
    for i in range(40):
        screen.note(f"flag{i}", "w" * 10_000)
    warnings = screen.warnings()
    assert len(warnings) == 20 and all(len(w) <= 340 for w in warnings)
