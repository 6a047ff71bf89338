"""Parsing and tailing the trial's metrics file: bad lines are skipped, never fatal."""

import math
from pathlib import Path

from spotsweep.services.agent.lines import BadLine, Checkpoint, Points, parse_line
from spotsweep.services.agent.tail import Tail


def test_points_and_checkpoints() -> None:
    assert parse_line('{"step": 10, "loss": 0.31, "val_loss": 0.35}') == Points(10, {"loss": 0.31, "val_loss": 0.35})
    assert parse_line('{"checkpoint": 10}') == Checkpoint(10)
    assert parse_line('{"step": 3.0, "acc": 1}') == Points(3, {"acc": 1.0})


def test_non_finite_values_are_kept_as_numbers() -> None:
    parsed = parse_line('{"step": 1, "loss": NaN, "x": "Infinity"}')
    assert isinstance(parsed, Points)
    assert math.isnan(parsed.values["loss"]) and parsed.values["x"] == math.inf


def test_python_json_non_finite_tokens_are_numbers_too() -> None:
    # json.dumps writes these bare tokens; the contract's strings are the portable form.
    parsed = parse_line('{"step": 2, "a": NaN, "b": Infinity, "c": -Infinity, "d": "-Infinity", "e": "NaN"}')
    assert isinstance(parsed, Points)
    v = parsed.values
    assert math.isnan(v["a"]) and v["b"] == math.inf and v["c"] == -math.inf and v["d"] == -math.inf
    assert math.isnan(v["e"]) and all(type(x) is float for x in v.values())


def test_a_deeply_nested_line_is_a_bad_line_not_a_recursion_error() -> None:
    parsed = parse_line("[" * 200_000)
    assert isinstance(parsed, BadLine) and "not JSON" in parsed.reason


def test_reasons_stay_short_whatever_the_line_holds() -> None:
    name = "n" * 10_000_000
    parsed = parse_line('{"step": 1, "%s": "x%s"}' % (name, "y" * 1_000_000))
    assert isinstance(parsed, BadLine) and len(parsed.reason) < 300


def test_bad_lines_say_why() -> None:
    cases = {
        "not json": "not JSON",
        "[1, 2]": "not a JSON object",
        '{"loss": 1}': "missing integer 'step'",
        '{"step": "ten", "loss": 1}': "step must be an integer, got 'ten'",
        '{"step": 1, "loss": "high"}': "metric 'loss' is not a number: 'high'",
        '{"step": 1, "ok": true}': "metric 'ok' is not a number: True",
        '{"checkpoint": -1}': "checkpoint must be a non-negative integer step",
        '{"step": 1, "loss": 1' + "0" * 400 + '}': "metric 'loss' is not a number",  # beyond a double
        '{"step": 1, "loss": 1' + "0" * 5000 + '}': "not JSON",  # beyond Python's integer digit limit
    }
    for line, reason in cases.items():
        parsed = parse_line(line)
        assert isinstance(parsed, BadLine) and reason in parsed.reason, line


def test_tail_returns_only_complete_lines_until_final(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    tail = Tail(f)
    assert tail.read() == []  # file not there yet
    f.write_text('{"step": 1}\n{"step": 2')
    assert tail.read() == [(1, '{"step": 1}')]
    with f.open("a") as out:
        out.write('}\n{"step": 3}')
    assert tail.read() == [(2, '{"step": 2}')]
    assert tail.read(final=True) == [(3, '{"step": 3}')]
    assert tail.read(final=True) == []



def test_steps_beyond_bigint_are_bad_lines_not_a_broken_collector_batch() -> None:
    assert isinstance(parse_line('{"step": 9223372036854775808, "loss": 1}'), BadLine)
    assert parse_line('{"step": 9223372036854775807, "loss": 1}') == Points(2**63 - 1, {"loss": 1.0})
