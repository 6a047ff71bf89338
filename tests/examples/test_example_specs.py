"""Every shipped example spec loads, validates and plans: a user copies these first."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotsweep.commands.submit import load, warnings
from spotsweep.services.planner.search import Search
from spotsweep.shared.space import total_trials

EXAMPLES = sorted([*(ROOT := Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"), *ROOT.glob("*/sweep.yaml")])


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT).with_suffix("")) for p in EXAMPLES])
def test_each_example_validates_and_proposes_its_first_trial(path: Path) -> None:
    spec = load(path)
    assert warnings(spec) == []
    search = Search(spec)
    assert total_trials(spec) >= 1 and search.propose(0).params


def test_the_deepseek_examples_are_the_classic_grid() -> None:
    by_name = {p.stem: load(p) for p in EXAMPLES}
    assert total_trials(by_name["deepseek-grid"]) == 729
    asha = Search(by_name["deepseek-asha"])
    first = asha.propose(0).params
    assert first["steps"] == 100 and set(by_name["deepseek-asha"].space) <= set(first)
