"""Loading and validating sweep specs: what a user sees for good and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec import (
    Choice,
    GridStrategy,
    IntRange,
    LogUniform,
    RandomStrategy,
    SweepSpec,
    Uniform,
    load_spec,
    load_spec_file,
    parse_spec,
    spec_json_schema,
)

EXAMPLE = """\
name: deepseek-grid
command: ["python", "train.py", "--lr", "{lr}", "--batch-size", "{batch_size}"]
metric: {name: val_loss, mode: min}
space:
  lr: [1.0e-4, 3.0e-4, 1.0e-3]
  batch_size: [32, 64, 128]
  dropout: {type: uniform, low: 0.1, high: 0.3}
  wd: {type: loguniform, low: 1.0e-5, high: 1.0e-2}
  layers: {type: int, low: 4, high: 8}
strategy: {type: random, trials: 50, seed: 7}
max_concurrent: 20
trial_name: "deepseek_exp_{index:03d}"
repeats: 1
retries: {max_failures: 3}
resources: {gpus: 1, class: gpu}
env: {}
priority: 0
"""

MINIMAL = {"name": "s", "command": ["python", "t.py", "--x", "{x}"], "metric": {"name": "loss"}, "space": {"x": [1, 2]}}


def errors_of(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        load_spec(text, source="sweep.yaml")
    return info.value.errors


def test_example_spec_loads_with_every_param_kind() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.name == "deepseek-grid"
    assert spec.space["lr"] == Choice(values=[1e-4, 3e-4, 1e-3])
    assert spec.space["dropout"] == Uniform(low=0.1, high=0.3)
    assert spec.space["wd"] == LogUniform(low=1e-5, high=1e-2)
    assert spec.space["layers"] == IntRange(low=4, high=8)
    assert spec.strategy == RandomStrategy(trials=50, seed=7)
    assert spec.resources.resource_class == "gpu"
    assert list(spec.space) == ["lr", "batch_size", "dropout", "wd", "layers"]


def test_defaults() -> None:
    spec = parse_spec(MINIMAL)
    assert spec.metric.mode == "min"
    assert spec.strategy == GridStrategy(max_trials=None)
    assert (spec.max_concurrent, spec.repeats, spec.priority, spec.env) == (20, 1, 0, {})
    assert spec.trial_name == "{name}_{index:04d}"
    assert spec.retries.max_failures == 3
    assert (spec.resources.gpus, spec.resources.resource_class) == (1, "gpu")


def test_json_input_and_string_command_split_with_shlex() -> None:
    data = {**MINIMAL, "command": "python 't r.py' --x {x}", "space": {"x": {"type": "choice", "values": [1e-05, "a"]}}}
    spec = load_spec(json.dumps(data).encode())
    assert spec.command == ["python", "t r.py", "--x", "{x}"]
    assert spec.space["x"] == Choice(values=[1e-05, "a"])


def test_yaml_reads_exponent_floats_like_json_does() -> None:
    # YAML 1.1 would read 1e-4 as the string "1e-4".
    spec = load_spec("name: s\ncommand: [t, '{x}']\nmetric: {name: m}\nspace: {x: [1e-4, 2E3, 5]}\n")
    values = spec.space["x"].values  # type: ignore[union-attr]
    assert values == [0.0001, 2000.0, 5]
    assert [type(v) for v in values] == [float, float, int]


def test_choice_values_keep_their_types() -> None:
    spec = parse_spec({**MINIMAL, "space": {"x": [1, 1.0, True, "1"]}})
    assert [type(v) for v in spec.space["x"].values] == [int, float, bool, str]  # type: ignore[union-attr]


def test_dump_reparses_to_an_equal_spec() -> None:
    spec = load_spec(EXAMPLE.replace("env: {}", "env: {OMP_NUM_THREADS: '4'}") + "\n")
    text = json.dumps(spec.to_json_dict())  # what the planner stores
    again = parse_spec(json.loads(text))
    assert again == spec
    assert json.dumps(again.to_json_dict()) == text  # types too: True == 1 would fool ==
    assert spec.to_json_dict()["resources"] == {"gpus": 1, "class": "gpu"}


def test_round_trip_keeps_bool_and_int_choices_apart() -> None:
    spec = parse_spec({**MINIMAL, "space": {"x": [True, 1, 1.5]}})
    again = parse_spec(json.loads(json.dumps(spec.to_json_dict())))
    assert [type(v) for v in again.space["x"].values] == [bool, int, float]  # type: ignore[union-attr]


def test_specs_are_frozen() -> None:
    spec = parse_spec(MINIMAL)
    with pytest.raises(ValidationError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_json_schema_describes_the_spec() -> None:
    schema = spec_json_schema()
    assert set(schema["required"]) == {"name", "command", "metric"}
    assert "class" in schema["$defs"]["Resources"]["properties"]
    assert schema["additionalProperties"] is False


def test_load_spec_file(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(EXAMPLE)
    assert load_spec_file(path) == load_spec(EXAMPLE)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert str(info.value) == f"{path}: no such file"


def test_syntax_error_in_a_file_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: s\nspace:\n  lr: [1, 2\n  x: 3\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert str(info.value) == f"{path}: YAML syntax error at line 4, column 4: expected ',' or ']', but got ':'"


BAD = [
    pytest.param(
        EXAMPLE.replace("{batch_size}", "{bs}"),
        [("command[5]", "placeholder {bs} names no parameter (known: batch_size, dropout, index, layers, lr, trial_name, wd)")],
        id="unknown-placeholder",
    ),
    pytest.param(
        EXAMPLE.replace("{type: random, trials: 50, seed: 7}", "{type: grid}"),
        [
            ("space.dropout", "uniform range cannot be enumerated by strategy grid; use strategy random or list the values"),
            ("space.wd", "loguniform range cannot be enumerated by strategy grid; use strategy random or list the values"),
        ],
        id="grid-over-continuous",
    ),
    pytest.param(EXAMPLE.replace("trials: 50, ", ""), [("strategy.trials", "required for strategy random")], id="random-without-trials"),
    pytest.param(
        EXAMPLE.replace("low: 0.1, high: 0.3", "low: 0.3, high: 0.1"),
        [("space.dropout.low", "must be less than high (got low=0.3, high=0.1)")],
        id="low-above-high",
    ),
    pytest.param(
        EXAMPLE.replace("low: 4, high: 8", "low: 8, high: 8"),
        [("space.layers.low", "must be less than high (got low=8, high=8)")],
        id="int-low-equals-high",
    ),
    pytest.param(
        EXAMPLE.replace("low: 1.0e-5", "low: 0"),
        [("space.wd.low", "must be greater than 0 for loguniform (got 0.0)")],
        id="loguniform-low-zero",
    ),
    pytest.param(EXAMPLE.replace("[32, 64, 128]", "[]"), [("space.batch_size", "must list at least one value")], id="empty-list"),
    pytest.param(
        EXAMPLE.replace("[32, 64, 128]", "{type: choice, values: []}"),
        [("space.batch_size.values", "must not be empty")],
        id="empty-choice",
    ),
    pytest.param(EXAMPLE.replace("high: 0.3}", "high: 0.3, hgh: 1}"), [("space.dropout.hgh", "unknown key (did you mean 'high'?)")], id="unknown-nested-key"),
    pytest.param(EXAMPLE + "max_concurent: 3\n", [("max_concurent", "unknown key (did you mean 'max_concurrent'?)")], id="typo"),
    pytest.param(EXAMPLE + "zzz: 3\n", [("zzz", "unknown key")], id="unknown-key-near-none"),
    pytest.param(EXAMPLE + "prority: 3\n", [("prority", "unknown key (did you mean 'priority'?)")], id="unknown-top-key"),
    pytest.param(EXAMPLE.replace("{gpus: 1, class: gpu}", "{gpus: 1, klass: gpu}"), [("resources.klass", "unknown key (did you mean 'class'?)")], id="unknown-key-resources"),
    pytest.param(
        EXAMPLE.replace("repeats: 1", "repeats: 3").replace("  lr:", "  seed: [1, 2]\n  lr:"),
        [("space.seed", "cannot be a parameter when repeats > 1 (got repeats=3); each repeat sets seed")],
        id="seed-with-repeats",
    ),
    pytest.param(
        EXAMPLE.replace("deepseek_exp_{index:03d}", "exp_{index:03d}_{depth}"),
        [("trial_name", "placeholder {depth} names no parameter (known: batch_size, dropout, index, layers, lr, name, wd)")],
        id="trial-name-unknown-field",
    ),
    pytest.param(
        EXAMPLE.replace("deepseek_exp_{index:03d}", "exp_{lr:03d}"),
        [("trial_name", "cannot format lr=0.0001 with '03d': Unknown format code 'd' for object of type 'float'")],
        id="trial-name-bad-format",
    ),
    pytest.param(EXAMPLE.replace('["python", "train.py", "--lr", "{lr}", "--batch-size", "{batch_size}"]', "[]"), [("command", "must not be empty")], id="empty-command"),
    pytest.param(EXAMPLE.replace('["python", "train.py", "--lr", "{lr}", "--batch-size", "{batch_size}"]', "''"), [("command", "must not be empty")], id="empty-command-string"),
    pytest.param(EXAMPLE.replace('"train.py"', "3"), [("command[1]", "Input should be a valid string (got 3)")], id="command-not-string"),
    pytest.param(
        EXAMPLE.replace('"train.py"', '"{lr"'),
        [("command[1]", "malformed template '{lr': expected '}' before end of string (write {{ and }} for literal braces)")],
        id="command-malformed",
    ),
    pytest.param(EXAMPLE.replace("mode: min", "mode: avg"), [("metric.mode", "Input should be 'min' or 'max' (got 'avg')")], id="bad-mode"),
    pytest.param(
        EXAMPLE.replace("type: random", "type: bayes"),
        [("strategy.type", "unknown type 'bayes' (expected one of: grid, random, subset, tpe, gp, cmaes, nsga2, asha, pbt)")],
        id="unknown-strategy",
    ),
    pytest.param(
        EXAMPLE.replace("{type: uniform, ", "{"),
        [("space.dropout.type", "required (one of: choice, uniform, loguniform, int)")],
        id="param-without-type",
    ),
    pytest.param(
        EXAMPLE.replace("[32, 64, 128]", "32"),
        [("space.batch_size", "must be a list of values or a mapping with a type (got 32)")],
        id="param-scalar",
    ),
    pytest.param(
        EXAMPLE.replace("[32, 64, 128]", "[32, null]"),
        [("space.batch_size.values[1]", "must be a number, string or bool (got None)")],
        id="choice-null",
    ),
    pytest.param(
        EXAMPLE.replace("name: deepseek-grid", "name: deep seek"),
        [("name", "must be 1-100 letters, digits, '-', '_' or '.', starting with a letter or digit (got 'deep seek')")],
        id="unsafe-name",
    ),
    pytest.param(
        EXAMPLE.replace("  lr:", "  index: [1]\n  lr:"),
        [("space.index", "reserved name; index, name, trial_name are built in")],
        id="reserved-param",
    ),
    pytest.param(EXAMPLE.replace("priority: 0", "priority: 10"), [("priority", "Input should be less than or equal to 9 (got 10)")], id="priority"),
    pytest.param(EXAMPLE.replace("trials: 50", "trials: '50'"), [("strategy.trials", "Input should be a valid integer (got '50')")], id="no-str-coercion"),
    pytest.param(EXAMPLE.replace("low: 4, high: 8", "low: 4, high: true"), [("space.layers.high", "Input should be a valid integer (got True)")], id="no-bool-coercion"),
    pytest.param(EXAMPLE.replace("env: {}", "env: {THREADS: 4}"), [("env.THREADS", "Input should be a valid string (got 4)")], id="env-not-string"),
    pytest.param(EXAMPLE.replace("metric: {name: val_loss, mode: min}", "metric: val_loss"), [("metric", "must be a mapping (got 'val_loss')")], id="metric-scalar"),
    pytest.param(EXAMPLE.replace("space:", "space:\n  lr: [1]", 1), [("", "sweep.yaml: YAML syntax error at line 6, column 3: duplicate key 'lr'")], id="duplicate-key"),
    pytest.param("name: s\nspace: [1, 2\n", [("", "sweep.yaml: YAML syntax error at line 3, column 1: expected ',' or ']', but got '<stream end>'")], id="yaml-syntax"),
    pytest.param("- a\n- b\n", [("", "sweep.yaml: top level must be a mapping (got list)")], id="top-level-list"),
    pytest.param("", [("", "sweep.yaml: top level must be a mapping (got an empty document)")], id="empty-document"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_specs_are_refused_naming_field_and_value(text: str, expected: list[tuple[str, str]]) -> None:
    assert errors_of(text) == expected


def test_error_message_joins_field_and_message() -> None:
    with pytest.raises(SpecError) as info:
        load_spec(EXAMPLE.replace("low: 0.1, high: 0.3", "low: 0.3, high: 0.1"))
    assert str(info.value) == "space.dropout.low: must be less than high (got low=0.3, high=0.1)"


def test_several_problems_are_reported_together() -> None:
    text = EXAMPLE.replace("max_concurrent: 20", "max_concurrent: 0").replace("{gpus: 1, class: gpu}", "{gpus: -1, class: gpu}")
    assert errors_of(text) == [
        ("max_concurrent", "Input should be greater than or equal to 1 (got 0)"),
        ("resources.gpus", "Input should be greater than or equal to 0 (got -1)"),
    ]


def test_parse_spec_refuses_non_mappings() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec([MINIMAL])
    assert str(info.value) == "top level must be a mapping (got list)"


def test_seed_and_builtins_are_valid_placeholders_with_repeats() -> None:
    spec = parse_spec({**MINIMAL, "repeats": 2, "command": ["t", "{x}", "{seed}", "{index}", "{trial_name}"], "trial_name": "{name}-{x}-{seed}"})
    assert spec.repeats == 2
    with pytest.raises(SpecError) as info:
        parse_spec({**MINIMAL, "command": ["t", "{seed}"]})
    assert info.value.errors == [("command[1]", "placeholder {seed} names no parameter (known: index, trial_name, x)")]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ValueError):
        SweepSpec(name="s", command=["t", "{nope}"], metric={"name": "m"})  # type: ignore[arg-type]


def test_yaml_12_scalars_keep_their_meaning() -> None:
    from spotsweep.shared.spec_load import yaml_load

    data = yaml_load("a: [on, off, yes, true, 010, 0x10, 1:30, 1e-4]\nb: &d {x: 1}\nc: {<<: *d, y: 2}\n")
    assert data == {"a": ["on", "off", "yes", True, 10, 16, "1:30", 0.0001], "b": {"x": 1}, "c": {"x": 1, "y": 2}}


def test_non_finite_choices_are_refused() -> None:
    with pytest.raises(SpecError, match=r"space.n.values\[0\]: must be a finite number \(got inf\)"):
        load_spec("name: d\ncommand: [echo, '{n}']\nmetric: {name: v}\nspace: {n: [.inf, 1]}\n")


# --- search strategies, early stopping, budgets, smoke ------------------------------------------

SEARCH = {"name": "s", "command": ["python", "t.py", "--lr", "{lr}", "--steps", "{steps}"], "metric": {"name": "loss"},
          "space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, "depth": [2, 4]}}
ASHA = {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 81}, "eta": 3, "trials": 30}


def search_errors(**changes: object) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec({**SEARCH, **changes})
    return info.value.errors


def test_search_specs_load_and_round_trip() -> None:
    from spotsweep.shared.spec import AshaStrategy, Budget, BudgetParam, HyperbandStop, MedianStop, ModelStrategy

    specs = [
        parse_spec({**SEARCH, "strategy": ASHA, "budget": {"max_trials": 100, "max_gpu_hours": 12.5, "max_cost": 20, "wall_time": "12h"},
                    "pricing": {"gpu_hour": 0.9, "on_demand_gpu_hour": 4.1}, "smoke": {"trials": 2, "budget": 2}}),
        parse_spec({**SEARCH, "command": ["t", "{lr}", "{depth}"], "strategy": {"type": "tpe", "trials": 50, "seed": 3, "startup_trials": 5},
                    "early_stop": {"type": "median", "warmup_steps": 10}}),
        parse_spec({**SEARCH, "strategy": {"type": "random", "trials": 64, "sampler": "sobol"},
                    "early_stop": {"type": "hyperband", "budget": {"param": "steps", "min": 1, "max": 27}}}),
        parse_spec({**SEARCH, "command": ["t"], "metric": [{"name": "loss"}, {"name": "latency", "mode": "min"}],
                    "strategy": {"type": "nsga2", "trials": 40, "population": 10}}),
    ]
    assert specs[0].strategy == AshaStrategy(budget=BudgetParam(param="steps", min=1, max=81), eta=3, trials=30)
    assert specs[0].budget is not None and specs[0].budget.wall_time == 12 * 3600
    assert parse_spec({**SEARCH, "strategy": ASHA, "budget": {"max_steps": 5000}}).budget == Budget(max_steps=5000)
    assert specs[1].strategy == ModelStrategy(type="tpe", trials=50, seed=3, startup_trials=5)
    assert specs[1].early_stop == MedianStop(warmup_steps=10)
    assert isinstance(specs[2].early_stop, HyperbandStop) and specs[2].early_stop.brackets is None
    assert specs[3].metric.name == "loss" and [m.name for m in specs[3].objectives] == ["loss", "latency"]
    for spec in specs:
        text = json.dumps(spec.to_json_dict())
        assert parse_spec(json.loads(text)) == spec
        assert json.dumps(parse_spec(json.loads(text)).to_json_dict()) == text


SEARCH_BAD = [
    pytest.param({"strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 81}}},
                 [("strategy.trials", "required for strategy asha unless every dimension is a list or an int range")], id="asha-trials"),
    pytest.param({"strategy": {**ASHA, "budget": {"param": "lr", "min": 1, "max": 81}}},
                 [("command[5]", "placeholder {steps} names no parameter (known: depth, index, lr, trial_name)"),
                  ("strategy.budget.param", "'lr' is also in space; the strategy sets the budget parameter, so remove it from space")],
                 id="budget-param-in-space"),
    pytest.param({"strategy": {**ASHA, "budget": {"param": "steps", "min": 9, "max": 3}}},
                 [("strategy.budget.min", "must be less than max (got min=9, max=3)")], id="budget-order"),
    pytest.param({"strategy": {**ASHA, "brackets": 9}},
                 [("strategy.brackets", "at most 5 fit between budget min 1 and max 81 with eta 3 (got 9)")], id="too-many-brackets"),
    pytest.param({"strategy": {**ASHA, "eta": 1}}, [("strategy.eta", "Input should be greater than or equal to 2 (got 1)")], id="eta"),
    pytest.param({"strategy": ASHA, "early_stop": {"type": "median"}},
                 [("early_stop", "strategy asha already stops trials early; remove early_stop, or use strategy random with early_stop hyperband")],
                 id="asha-with-early-stop"),
    pytest.param({"strategy": {"type": "tpe", "trials": 5}, "early_stop": {"type": "hyperband", "budget": {"param": "steps", "min": 1}}},
                 [("early_stop.budget.max", "required for early_stop hyperband")], id="hyperband-budget-max"),
    pytest.param({"strategy": {"type": "tpe", "trials": 5}, "early_stop": {"type": "sometimes"}},
                 [("early_stop.type", "unknown type 'sometimes' (expected one of: hyperband, median)")], id="early-stop-type"),
    pytest.param({"strategy": {"type": "gp", "trials": 5, "population": 4}},
                 [("strategy.population", "applies to strategy cmaes and nsga2 only (got type gp)")], id="population-for-gp"),
    pytest.param({"command": ["t"], "strategy": {"type": "nsga2", "trials": 5}},
                 [("metric", "strategy nsga2 needs two or more objectives: write metric as a list")], id="nsga2-one-objective"),
    pytest.param({"command": ["t"], "metric": [{"name": "a"}, {"name": "b"}], "strategy": {"type": "cmaes", "trials": 5}},
                 [("strategy.type", "cmaes optimises one metric (got 2 objectives); use tpe, gp or nsga2")], id="cmaes-two-objectives"),
    pytest.param({"command": ["t"], "metric": [{"name": "a"}, {"name": "a", "mode": "max"}], "strategy": {"type": "tpe", "trials": 5}},
                 [("metric", "objectives must have distinct names (got a, a)")], id="duplicate-objectives"),
    pytest.param({"command": ["t"], "metric": []}, [("metric", "must list at least one objective")], id="empty-objectives"),
    pytest.param({"strategy": ASHA, "budget": {"max_cost": 10}}, [("budget.max_cost", "needs pricing.gpu_hour to turn GPU-hours into cost")],
                 id="cost-without-pricing"),
    pytest.param({"strategy": ASHA, "budget": {"wall_time": "soon"}},
                 [("budget.wall_time", "must be seconds or a duration like 90s, 30m, 2h, 1h30m (got 'soon')")], id="wall-time"),
    pytest.param({"strategy": ASHA, "budget": {"max_gpu_hours": 0}},
                 [("budget.max_gpu_hours", "Input should be greater than 0 (got 0)")], id="gpu-hours-zero"),
    pytest.param({"strategy": ASHA, "budget": {"max_steps": -3}},
                 [("budget.max_steps", "must be a positive integer (got -3)")], id="max-steps-negative"),
    pytest.param({"strategy": ASHA, "budget": {"max_steps": 2.5}},
                 [("budget.max_steps", "must be a positive integer (got 2.5)")], id="max-steps-fraction"),
    pytest.param({"strategy": ASHA, "budget": {"max_steps": "1000"}},
                 [("budget.max_steps", "must be a positive integer (got '1000')")], id="max-steps-text"),
    pytest.param({"command": ["t"], "strategy": {"type": "random", "trials": 3}, "smoke": {"budget": 2}},
                 [("smoke.budget", "needs a budget parameter: set smoke.param to a parameter in space (e.g. steps), or use a budget "
                   "with a param (strategy asha, early_stop hyperband)")], id="smoke-without-param"),
    pytest.param({"command": ["t"], "strategy": {"type": "random", "trials": 3}, "smoke": {"budget": 2, "param": "epochs"}},
                 [("smoke.param", "'epochs' is neither in space nor the budget parameter")], id="smoke-unknown-param"),
    pytest.param({"strategy": {"type": "random", "trials": 3, "sampler": "halton"}},
                 [("strategy.sampler", "Input should be 'random' or 'sobol' (got 'halton')")], id="unknown-sampler"),
]


@pytest.mark.parametrize(("changes", "expected"), SEARCH_BAD)
def test_bad_search_specs_name_field_and_value(changes: dict[str, object], expected: list[tuple[str, str]]) -> None:
    assert search_errors(**changes) == expected


def test_budget_parameter_and_smoke_budget_are_checked_in_templates() -> None:
    spec = parse_spec({**SEARCH, "command": ["t", "{steps:03d}"], "strategy": ASHA, "smoke": {"budget": 2}})
    assert spec.smoke is not None and spec.smoke.budget == 2
    with pytest.raises(SpecError) as info:
        parse_spec({**SEARCH, "command": ["t", "{steps:.2s}"], "strategy": ASHA})
    assert info.value.errors[0][0] == "command[1]" and "steps=1" in info.value.errors[0][1]


def test_summary_describes_the_search_for_validate() -> None:
    from spotsweep.shared.spec_search import summary

    grid = {f"p{k}": [1, 2, 3] for k in range(6)}
    asha = parse_spec({**SEARCH, "strategy": ASHA, "early_stop": None, "budget": {"max_gpu_hours": 10, "wall_time": "2h"},
                       "smoke": {"budget": 2}})
    assert summary(asha) == ("strategy asha (budget steps 1..81, eta 3, 1 bracket(s), configs from random), "
                             "budget max_gpu_hours 10, wall_time 7200, smoke 2 trial(s) first")
    subset = parse_spec({**SEARCH, "command": ["t"], "space": grid, "strategy": {"type": "subset", "trials": 30}})
    assert summary(subset) == "strategy subset (30 of 729 grid points, balanced)"
    multi = parse_spec({**SEARCH, "command": ["t"], "metric": [{"name": "a"}, {"name": "b", "mode": "max"}],
                        "strategy": {"type": "random", "trials": 8, "sampler": "sobol"}})
    assert summary(multi) == "strategy random (Sobol'), objectives a (min), b (max)"
    median = parse_spec({**SEARCH, "command": ["t"], "strategy": {"type": "tpe", "trials": 8}, "early_stop": {"type": "median"}})
    assert summary(median) == "strategy tpe, early_stop median"


OOM_SPEC = """\
name: oom
command: ["python", "train.py", "--batch-size", "{batch_size}"]
metric: {name: loss}
space: {batch_size: [64, 128]}
retries: {on_oom: halve_batch}
"""


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_halve_batch_without_the_accumulation_slot_is_refused_by_validate_and_submit(tmp_path: Path, command: str) -> None:
    """The retry doubles grad_accum to keep the effective batch: a command without the slot would train with half
    the batch instead. Refused before anything is posted (submit's broker here is a closed port)."""
    import subprocess
    import sys

    path = tmp_path / "oom.yaml"
    path.write_text(OOM_SPEC)
    env = {"PATH": "/usr/bin:/bin", "SPOTSWEEP_BROKER_URL": "amqp://guest:guest@127.0.0.1:9/"}
    proc = subprocess.run([sys.executable, "-m", "spotsweep", command, str(path)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stderr.strip() == ("error: retries.on_oom: halve_batch keeps the effective batch by doubling grad_accum, but "
                                   "the command has no {grad_accum} slot (add e.g. --grad-accum {grad_accum}, or set "
                                   "retries.accum_param to the command's)"), proc.stderr
    fixed = OOM_SPEC.replace('"{batch_size}"]', '"{batch_size}", "--grad-accum", "{grad_accum}"]')
    assert load_spec(fixed).retries.on_oom == "halve_batch"
    named = OOM_SPEC.replace('"{batch_size}"]', '"{batch_size}", "--accum", "{micro}"]').replace(
        "halve_batch}", "halve_batch, accum_param: micro}")
    assert load_spec(named).retries.accum_param == "micro"
