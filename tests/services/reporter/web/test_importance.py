"""Importance on synthetic objectives whose answer is known."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
import pytest

from spotsweep.shared.optuna_space import distributions
from spotsweep.services.reporter.web.importance import as_json, importance, usable_params
from spotsweep.shared.spec import parse_spec

SPACE = parse_spec({
    "name": "imp", "command": ["x"], "metric": {"name": "loss"},
    "space": {"a": {"type": "uniform", "low": 0, "high": 1}, "lr": {"type": "loguniform", "low": 1e-5, "high": 1e-1},
              "opt": ["adam", "sgd", "lion"], "e": {"type": "uniform", "low": 0, "high": 1}, "f": [1, 2],
              "noise": {"type": "int", "low": 1, "high": 10}},
    "strategy": {"type": "random", "trials": 1000},
}).space


def study_trials(space: Any, rows: list[dict[str, Any]], metric: str, dists: Any) -> list[optuna.trial.FrozenTrial]:
    """The trials importance uses, as Optuna trials (for Optuna's own evaluator to compare with)."""
    return [optuna.trial.create_trial(params=p, distributions=dict(dists), value=v)
            for p, v in zip(*usable_params(space, rows, metric, dists))]


def sample(n: int, objective: Any, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        p = {"a": rng.random(), "lr": 10 ** rng.uniform(-5, -1), "opt": rng.choice(["adam", "sgd", "lion"]),
             "e": rng.random(), "f": rng.choice([1, 2]), "noise": rng.randint(1, 10)}
        rows.append({"trial_id": str(i), "state": "completed", "params": p, "metrics": {"loss": objective(p)}})
    return rows


def known(p: dict[str, Any]) -> float:
    # a: var 4/12; lr (per decade, log scale): 0.25 * 16/12; e and f: main effects plus an e x f interaction;
    # opt and noise: nothing.
    return 2 * p["a"] + 0.5 * math.log10(p["lr"]) + 3 * p["e"] * (1.0 if p["f"] == 1 else 0.2)


def test_the_order_of_importance_and_the_interacting_pair_are_found() -> None:
    result = importance(SPACE, sample(600, known), "loss")
    order = [name for name, _ in result.params]
    assert set(order[:4]) == {"a", "lr", "e", "f"}, result.params
    shares = dict(result.params)
    assert shares["opt"] < 0.02 and shares["noise"] < 0.02
    assert result.interactions[0][0] == ("e", "f"), result.interactions
    assert result.interactions[0][1] > 5 * result.interactions[1][1]
    assert 0.04 < result.interactions[0][1] < 0.2  # the true share is 0.094
    assert math.isclose(sum(shares.values()), 1.0) and all(0 <= v <= 1 for v in shares.values())
    assert all(v >= 1e-3 for _, v in result.interactions)  # noise is not shown


def test_a_log_scale_parameter_is_weighed_per_decade() -> None:
    # The loss depends only on the decade of lr: in raw space nearly all of the range is the top decade.
    result = importance(SPACE, sample(400, lambda p: abs(math.log10(p["lr"]) + 3) + 0.1 * p["a"]), "loss")
    assert result.params[0][0] == "lr" and result.params[0][1] > 0.8


def test_a_categorical_parameter_that_decides_is_found() -> None:
    result = importance(SPACE, sample(300, lambda p: {"adam": 1.0, "sgd": 2.0, "lion": 1.1}[p["opt"]] + 0.05 * p["a"]), "loss")
    assert result.params[0][0] == "opt"


def test_main_effects_agree_with_optunas_own_fanova_on_linear_params() -> None:
    rows = sample(150, lambda p: 3 * p["a"] + 1.5 * p["e"] + 0.1 * p["noise"])
    ours = [n for n, _ in importance(SPACE, rows, "loss").params][:3]
    dists = {k: d for k, d in distributions(SPACE).items()}
    study = optuna.create_study()
    study.add_trials(study_trials(SPACE, rows, "loss", dists))
    theirs = list(optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)))
    assert ours == theirs[:3] == ["a", "e", "noise"]


GRID = parse_spec({"name": "grid", "command": ["x"], "metric": {"name": "loss"}, "strategy": {"type": "grid"},
                   "space": {"learning_rate": [0.001, 0.01, 0.1], "optimizer": ["adam", "sgd"]}}).space
RANGES = parse_spec({"name": "ranges", "command": ["x"], "metric": {"name": "loss"}, "strategy": {"type": "random", "trials": 9},
                     "space": {"a": {"type": "uniform", "low": 0, "high": 1}, "b": {"type": "int", "low": 1, "high": 10},
                               "opt": ["adam", "sgd", "lion"], "e": {"type": "uniform", "low": 0, "high": 1}}}).space


def grid_rows() -> list[dict[str, Any]]:
    """The demo's 3x2 grid: SGD's loss spans 3.31 to 4.82 across learning rates, Adam's barely moves."""
    sgd = {0.001: 4.82, 0.01: 3.9, 0.1: 3.31}
    return [{"state": "completed", "params": {"learning_rate": lr, "optimizer": opt},
             "metrics": {"loss": sgd[lr] if opt == "sgd" else 2.3 + 0.01 * i}}
            for i, (lr, opt) in enumerate((lr, opt) for lr in sgd for opt in ("adam", "sgd"))]


def range_rows(n: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    rows = []
    for _ in range(n):
        p = {"a": rng.random(), "b": rng.randint(1, 10), "opt": rng.choice(["adam", "sgd", "lion"]), "e": rng.random()}
        loss = 2 * p["a"] + 0.1 * p["b"] + {"adam": 0.0, "sgd": 1.0, "lion": 0.3}[p["opt"]] + 3 * p["e"] * p["a"]
        rows.append({"state": "completed", "params": p, "metrics": {"loss": loss}})
    return rows


@pytest.mark.parametrize(("space", "rows"), [(GRID, grid_rows()), (RANGES, range_rows(12)), (RANGES, range_rows(60)),
                                             (RANGES, range_rows(160))], ids=["grid-6", "random-12", "random-60", "random-160"])
def test_main_effects_agree_with_optunas_fanova_evaluator_within_its_seed_spread(space: Any, rows: list[dict[str, Any]]) -> None:
    dists = {k: d for k, d in distributions(space).items() if not d.single()}
    theirs, ours = [], []
    for seed in range(3):
        study = optuna.create_study()
        study.add_trials(study_trials(space, rows, "loss", dists))
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
        theirs.append(optuna.importance.get_param_importances(study, evaluator=evaluator))
        ours.append(dict(importance(space, rows, "loss", seed=seed).params))
    for name in dists:
        low, high = min(t[name] for t in theirs), max(t[name] for t in theirs)
        ours_low, ours_high = min(o[name] for o in ours), max(o[name] for o in ours)
        slack = 0.03 + (high - low)  # its own spread over seeds, and a little
        assert low - slack <= ours_low and ours_high <= high + slack, (name, (low, high), (ours_low, ours_high))
        assert 0.0 <= ours_low and ours_high <= 1.0


def test_a_small_sweep_says_its_importance_is_rough_and_an_empty_interactions_panel_says_why() -> None:
    body = as_json(importance(GRID, grid_rows(), "loss"))
    assert "only 6 completed trials" in body["caution"]
    assert dict((p["name"], p["importance"]) for p in body["params"])["learning_rate"] > 0.15  # not 0.000, as it was
    assert all(i["importance"] >= 1e-3 for i in body["interactions"])
    if not body["interactions"]:
        assert "no pair" in body["interactions_note"]
    assert "caution" not in as_json(importance(RANGES, range_rows(60), "loss"))


@pytest.mark.parametrize("n", [0, 3])
def test_fewer_than_four_completed_trials_answer_empty_with_the_reason(n: int) -> None:
    body = as_json(importance(SPACE, sample(n, known), "loss"))
    assert body["params"] == [] and body["interactions"] == [] and "at least 4" in body["reason"]


def test_nan_failed_and_smoke_trials_are_left_out() -> None:
    rows = sample(10, known)
    rows[0]["metrics"]["loss"] = "NaN"
    rows[1]["state"] = "failed"
    rows[2]["smoke"] = True
    assert importance(SPACE, rows, "loss").trials == 7


def test_ped_anova_gives_main_effects() -> None:
    result = importance(SPACE, sample(300, known), "loss", method="ped-anova")
    assert result.method == "ped-anova" and result.interactions == []
    assert result.params[0][0] in {"a", "lr", "e", "f"}


def test_trials_whose_params_lie_outside_the_space_are_left_out() -> None:
    # As after an `extend` changed the space: past a range's end, off an int's step, past an int's end.
    space = parse_spec({
        "name": "imp", "command": ["x"], "metric": {"name": "loss"},
        "space": {"x": {"type": "uniform", "low": 0, "high": 1}, "k": {"type": "int", "low": 0, "high": 8, "step": 2}},
        "strategy": {"type": "random", "trials": 100},
    }).space
    rows = [{"trial_id": str(i), "state": "completed", "params": {"x": i / 20, "k": 2 * (i % 5)}, "metrics": {"loss": i}}
            for i in range(20)]
    strays = [{"x": 1.5, "k": 2}, {"x": 0.5, "k": 3}, {"x": 0.5, "k": 10}, {"x": -0.1, "k": 0}]
    rows += [{"trial_id": f"s{i}", "state": "completed", "params": p, "metrics": {"loss": 100.0}}
             for i, p in enumerate(strays)]
    assert importance(space, rows, "loss").trials == 20
    assert importance(space, rows[:20] + [{**rows[0], "trial_id": "in"}], "loss").trials == 21


def test_importance_prints_no_optuna_study_line() -> None:
    """`spotsweep report --html` computes importance: Optuna's "A new study created" line is not the report's."""
    import logging

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    optuna.logging.set_verbosity(optuna.logging.INFO)  # Optuna's default
    logging.getLogger("optuna").addHandler(handler)
    try:
        importance(SPACE, sample(100, known), "loss")
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    assert not [m for m in seen if "A new study created" in m], seen
