"""Ranking and the JSON contract, without a database."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from spotsweep.services.reporter.web.present import dumps, ranked, ranked_bodies


def row(trial_id: str, state: str, value: object) -> dict:
    return {"trial_id": trial_id, "trial_name": trial_id, "state": state, "params": {}, "metrics": {"loss": value}}


def test_non_finite_objectives_rank_after_every_finite_one_in_both_modes() -> None:
    rows = [row("nan", "completed", "NaN"), row("inf", "completed", "-Infinity"), row("a", "completed", 2.0),
            row("b", "completed", 1.0), row("run", "running", None), row("fail", "failed", None)]
    assert [r["trial_id"] for r in ranked(rows, "loss", "min")][:2] == ["b", "a"]
    assert [r["trial_id"] for r in ranked(rows, "loss", "max")][:2] == ["a", "b"]
    for mode in ("min", "max"):
        order = [r["trial_id"] for r in ranked(rows, "loss", mode)]
        assert set(order[2:4]) == {"nan", "inf"} and order[4:] == ["run", "fail"]


def test_dumps_is_strict_json_with_the_contract_strings() -> None:
    body = {"v": [float("nan"), float("inf"), -float("inf"), 1.5], "t": datetime(2026, 1, 2, tzinfo=timezone.utc), "p": (1, 2)}
    assert json.loads(dumps(body)) == {"v": ["NaN", "Infinity", "-Infinity", 1.5], "t": "2026-01-02T00:00:00+00:00", "p": [1, 2]}
    json.loads(dumps(body), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # no bare NaN tokens


def test_the_trial_list_built_by_the_database_ranks_best_first_and_ranks_only_finite_objectives() -> None:
    def row(trial_id: str, state: str, objective: float | None) -> dict[str, object]:
        return {"body": json.dumps({"trial_id": trial_id, "name": "<x>"}), "state": state, "trial_id": trial_id,
                "objective": objective}

    rows = [row("a", "failed", None), row("b", "completed", 2.0), row("c", "completed", None), row("d", "running", None),
            row("e", "completed", 1.0)]
    listed = json.loads(ranked_bodies(rows, "min"))
    assert [(t["trial_id"], t["rank"]) for t in listed] == [("e", 1), ("b", 2), ("c", None), ("d", None), ("a", None)]
    assert [t["trial_id"] for t in json.loads(ranked_bodies(rows, "max"))][:2] == ["b", "e"]
