"""Specs past what the planner, the database or a process can take are refused
at validate, naming the field and the size (issue: one bad trial or message
hurts no one)."""

from __future__ import annotations

from typing import Any

import pytest

from spotsweep.shared.errors import SpecError
from spotsweep.shared.limits import Limits
from spotsweep.shared.spec import parse_spec

BASE: dict[str, Any] = {"name": "s", "command": ["python", "t.py", "--x", "{x}"], "metric": {"name": "loss"},
                        "space": {"x": [1, 2]}}


def refused(**changes: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, **changes})
    return str(info.value)


def test_a_grid_past_what_can_be_counted_is_refused_naming_its_size() -> None:
    space = {f"p{i}": list(range(10)) for i in range(20)}  # 10^20 configs: past a bigint
    message = refused(space=space, command=["python", "t.py"])
    assert message.startswith("space: the sweep would have 1e+20 trials") and "2^53" in message


def test_too_many_sampled_trials_are_refused_on_the_strategy() -> None:
    # A continuous space: over a finite one, trials past its size run each config once (no repeats).
    message = refused(strategy={"type": "random", "trials": 10**20}, space={"x": {"type": "uniform", "low": 0, "high": 1}})
    assert message.startswith("strategy.trials: the sweep would have 1e+20 trials")


def test_a_huge_grid_with_a_max_trials_is_fine() -> None:
    space = {f"p{i}": list(range(10)) for i in range(20)}
    spec = parse_spec({**BASE, "command": ["python", "t.py"], "space": space, "strategy": {"type": "grid", "max_trials": 50}})
    assert spec.strategy.max_trials == 50


@pytest.mark.parametrize("template, expected", [
    ("{index:>10000000}", "width or precision 10000000 in {index:>10000000} is too large (at most 1000)"),
    ("{name}_{index:>300}", "renders to 302 characters (at most 200)"),
])
def test_rendered_trial_names_are_bounded_before_anything_is_rendered(template: str, expected: str) -> None:
    assert expected in refused(trial_name=template)


def test_a_long_choice_value_in_the_trial_name_is_refused() -> None:
    assert "renders to 302 characters" in refused(trial_name="{x}_{index}", space={"x": ["a" * 300, "b"]})


@pytest.mark.parametrize("command, expected", [([], "must not be empty"), ([""], "must name a program to run first"),
                                               (["  ", "x"], "must name a program to run first")])
def test_a_command_that_names_no_program_is_refused(command: list[str], expected: str) -> None:
    assert refused(command=command).startswith(f"command: {expected}")


def test_a_spec_with_200000_unknown_keys_gets_a_bounded_error() -> None:
    message = refused(**{f"k{i}": 1 for i in range(200_000)})
    assert len(message) < 1000 and message.endswith("and 199980 more problems")


def test_limits_are_settable_within_the_hard_caps() -> None:
    spec = parse_spec({**BASE, "limits": {"metric_names": 50, "line_bytes": 4096}})
    assert spec.limits == Limits(metric_names=50, line_bytes=4096)
    assert "limits.metric_name_chars" in refused(limits={"metric_name_chars": 10_000})
    assert "limits.nope: unknown key" in refused(limits={"nope": 1})
    assert "limits.metric_names" in refused(limits={"metric_names": "10"})  # strict, like the rest of the spec


def test_a_spec_nested_past_the_stack_is_a_spec_error() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    assert "space" in refused(space={"x": deep}) or "nested too deeply" in refused(space={"x": deep})
