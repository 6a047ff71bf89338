"""Importance on synthetic objectives whose answer is known."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
import pytest

from spotsweep.services.planner.search.distributions import distributions
from spotsweep.services.reporter.web.importance import as_json, importance, study_trials
from spotsweep.shared.spec import parse_spec

SPACE = parse_spec({
    "name": "imp", "command": ["x"], "metric": {"name": "loss"},
    "space": {"a": {"type": "uniform", "low": 0, "high": 1}, "lr": {"type": "loguniform", "low": 1e-5, "high": 1e-1},
              "opt": ["adam", "sgd", "lion"], "e": {"type": "uniform", "low": 0, "high": 1}, "f": [1, 2],
              "noise": {"type": "int", "low": 1, "high": 10}},
    "strategy": {"type": "random", "trials": 1000},
}).space


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
    assert sum(shares.values()) + sum(v for _, v in result.interactions) < 1.1


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
