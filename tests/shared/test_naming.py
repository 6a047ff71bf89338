"""Trial names and argv rendering from spec templates."""

from __future__ import annotations

import pytest

from spotsweep.shared.errors import SpecError
from spotsweep.shared.naming import check_template, placeholders, render_argv, trial_name
from spotsweep.shared.space import params_at
from spotsweep.shared.spec import parse_spec


def test_placeholders_include_nested_format_specs_and_skip_escapes() -> None:
    assert placeholders("--lr={lr:.3g} {{literal}} {index:0{width}d}") == {"lr", "index", "width"}
    assert placeholders("plain") == set()
    with pytest.raises(ValueError):
        placeholders("{lr")


def test_render_argv_fills_each_element_without_splitting() -> None:
    argv = render_argv(
        ["python", "train.py", "--lr", "{lr}", "--name={trial_name}", "--tag", "{tag}", "{{json}}"],
        {"lr": 3e-4, "tag": "a b; rm -rf /"},
        {"trial_name": "s_0001", "index": 1},
    )
    assert argv == ["python", "train.py", "--lr", "0.0003", "--name=s_0001", "--tag", "a b; rm -rf /", "{json}"]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0001, "0.0001"), (1e-05, "1e-05"), (0.1 + 0.2, "0.30000000000000004"), (3.0, "3.0"), (128, "128"), (True, "True"), ("x", "x")],
)
def test_values_render_round_trippably(value: object, text: str) -> None:
    (rendered,) = render_argv(["{v}"], {"v": value})
    assert rendered == text
    if isinstance(value, float):
        assert float(rendered) == value


def test_render_argv_refuses_unknown_placeholder() -> None:
    with pytest.raises(SpecError) as info:
        render_argv(["t", "{nope}"], {})
    assert str(info.value) == "command: placeholder {nope} names no parameter"


def test_trial_name_uses_params_index_and_sweep_name() -> None:
    spec = parse_spec(
        {
            "name": "deepseek",
            "command": ["t"],
            "metric": {"name": "loss"},
            "space": {"lr": [1e-4, 3e-4], "layers": {"type": "int", "low": 4, "high": 6}},
            "trial_name": "{name}_exp_{index:03d}_lr{lr}_l{layers}",
        }
    )
    assert trial_name(spec, 4, params_at(spec, 4)) == "deepseek_exp_004_lr0.0003_l5"


def test_default_trial_name() -> None:
    spec = parse_spec({"name": "grid.v2", "command": ["t"], "metric": {"name": "loss"}, "repeats": 2})
    assert trial_name(spec, 17, params_at(spec, 1)) == "grid.v2_0017"


def test_check_template_reports_each_problem() -> None:
    samples = {"lr": [0.1, 0.2], "n": [1, 2], "index": [0]}
    assert check_template("--n={n:03d} --lr={lr:.2e}", samples) == []
    assert check_template("{n[0]} {} {x} {lr:d}", samples) == [
        "placeholder {n[0]} must be a plain parameter name",
        "positional placeholder {} in '{n[0]} {} {x} {lr:d}'; name a parameter (known: index, lr, n)",
        "placeholder {x} names no parameter (known: index, lr, n)",
        "cannot format lr=0.1 with 'd': Unknown format code 'd' for object of type 'float'",
    ]


def test_conversions_and_nested_specs_are_checked_by_rendering() -> None:
    from spotsweep.shared.naming import check_template

    samples = {"n": [1, 2], "w": [3]}
    assert check_template("{n!r}-{n:{w}}", samples) == []
    assert check_template("{n!z}", samples) == ["cannot render '{n!z}': Unknown conversion specifier z"]
    assert "Unknown format code 'd'" in check_template("{n!s:03d}", samples)[0]
