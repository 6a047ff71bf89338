"""PBT's segment decisions, fed plain events: who exploits whom, what explore
draws, and that a seeded RNG makes every decision reproducible."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from spotsweep.services.planner.search import Action, Search, TrialRecord, Usage
from spotsweep.services.planner.search.pbt import Member, PbtConfig, SegmentEnd, decide, explore
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.spec_search.pbt import Mutation
from spotsweep.shared.states import TrialState

SPACE_SPEC: dict[str, Any] = {
    "name": "pbt", "command": ["t", "{lr}", "{steps}"], "metric": {"name": "loss"},
    "space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1.0}, "layers": {"type": "int", "low": 1, "high": 9,
                                                                                  "step": 2},
              "opt": ["adam", "sgd", "lion"]},
    "strategy": {"type": "pbt", "population": 8, "interval": {"param": "steps", "every": 10, "max": 30},
                 "quantile": 0.25, "mutations": {"lr": {"factor": [0.8, 1.2]}, "opt": {"values": ["adam", "sgd", "lion"]}},
                 "resample_probability": 0.0, "seed": 3},
}


def config(**changes: Any) -> PbtConfig:
    spec = parse_spec(SPACE_SPEC)
    base = dict(every=10, max=30, quantile=0.25, mutations={"lr": Mutation(factor=[0.8, 1.2]),
                                                             "opt": Mutation(values=["adam", "sgd", "lion"])},
                resample_probability=0.0, space=dict(spec.space), mode="min")
    return PbtConfig(**{**base, **changes})


def member(index: int, values: dict[int, float], lr: float = 0.01, opt: str = "sgd") -> Member:
    return Member(index, {"lr": lr, "layers": 3, "opt": opt, "steps": max(values, default=10)}, values)


def population(scores: list[float], step: int = 10) -> list[Member]:
    return [member(i, {step: v}, lr=0.01 * (i + 1)) for i, v in enumerate(scores)]


def end(index: int, value: float, step: int = 10) -> SegmentEnd:
    return SegmentEnd(index, step, value)


def test_the_bottom_quantile_exploits_a_top_quantile_member_with_explored_params() -> None:
    pop = population([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])  # 8 ranked, quantile 0.25: top {0, 1}, bottom {6, 7}
    d = decide(config(), pop, end(7, 8.0), random.Random(0))
    assert (d.action, d.budget) == ("exploit", 20) and d.donor in (0, 1)
    donor_lr = pop[d.donor].params["lr"]
    assert d.params["lr"] in (pytest.approx(donor_lr * 0.8), pytest.approx(donor_lr * 1.2))  # the donor's, perturbed
    assert d.params["opt"] in ("adam", "lion")  # a neighbour of the donor's "sgd"
    assert d.params["layers"] == 3 and "steps" not in d.params  # not mutated: the donor's; the budget is the caller's
    assert "ranked 8 of 8 at step 10 (bottom 2)" in d.reason


@pytest.mark.parametrize("index, value", [(0, 1.0), (3, 4.0), (5, 6.0)])
def test_the_rest_continue_with_their_own_checkpoint_and_params(index: int, value: float) -> None:
    d = decide(config(), population([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), end(index, value), random.Random(0))
    assert (d.action, d.budget, d.donor, d.params) == ("continue", 20, None, {})


def test_max_mode_ranks_the_largest_first() -> None:
    pop = population([1.0, 2.0, 3.0, 4.0])
    d = decide(config(mode="max", quantile=0.25), pop, end(0, 1.0), random.Random(0))
    assert (d.action, d.donor) == ("exploit", 3)
    assert decide(config(mode="max", quantile=0.25), pop, end(3, 4.0), random.Random(0)).action == "continue"


def test_quantiles_size_the_top_and_bottom() -> None:
    pop = population([float(v) for v in range(10)])
    # quantile 0.5 of 10: the bottom 5 exploit, the top 5 donate
    assert [decide(config(quantile=0.5), pop, end(i, float(i)), random.Random(0)).action for i in range(10)] == \
        ["continue"] * 5 + ["exploit"] * 5
    donors = {decide(config(quantile=0.5), pop, end(9, 9.0), random.Random(s)).donor for s in range(60)}
    assert donors == {0, 1, 2, 3, 4}
    # quantile 0.1 of 10: only the worst
    assert [decide(config(quantile=0.1), pop, end(i, float(i)), random.Random(0)).action for i in range(10)] == \
        ["continue"] * 9 + ["exploit"]


def test_too_few_members_at_the_interval_all_continue() -> None:
    d = decide(config(quantile=0.25), population([1.0, 2.0]), end(1, 2.0), random.Random(0))  # 2 * 0.25 < 1
    assert d.action == "continue" and "too few for quantile 0.25" in d.reason


def test_asynchronous_a_trial_compares_with_the_latest_value_at_or_below_its_interval() -> None:
    pop = [member(0, {10: 5.0, 20: 0.5}),  # ahead: its value at 20 is not yet comparable at 10... it is at 20
           member(1, {10: 1.0}),  # behind: its latest value at or below 20 is the one at 10
           member(2, {}),  # nothing ended yet: not ranked
           member(3, {10: 9.0, 20: 3.0})]
    d = decide(config(quantile=0.5), pop, SegmentEnd(3, 20, 3.0), random.Random(0))
    assert d.action == "exploit" and d.donor in (0, 1) and "of 3" in d.reason
    at_10 = decide(config(quantile=0.5), pop, SegmentEnd(3, 10, 9.0), random.Random(0))
    assert at_10.action == "exploit" and "ranked 3 of 3" in at_10.reason  # 0 counts with its 5.0 at 10


def test_an_exploit_goes_one_interval_past_the_donor_and_never_copies_a_finished_one() -> None:
    pop = [member(0, {10: 1.0, 20: 0.5}), member(1, {10: 9.0})]
    d = decide(config(quantile=0.5), pop, end(1, 9.0), random.Random(0))
    assert (d.action, d.donor, d.budget) == ("exploit", 0, 30)  # the donor's checkpoint is at 20 or later
    done = [member(0, {10: 1.0, 30: 0.1}), member(1, {10: 9.0})]
    d = decide(config(quantile=0.5), done, end(1, 9.0), random.Random(0))
    assert d.action == "continue" and "reached max 30" in d.reason


def test_a_donor_behind_the_trial_is_never_taken() -> None:
    # 0 and 1 lead at their step 10 while 2 has reached 20: copying them would train 10-20 again
    pop = [member(0, {10: 1.0}), member(1, {10: 2.0}), member(2, {10: 3.0, 20: 9.0}), member(3, {10: 4.0})]
    runs = [decide(config(quantile=0.5), pop, SegmentEnd(2, 20, 9.0), random.Random(s)) for s in range(30)]
    assert {(d.action, d.donor, d.budget) for d in runs} == {("continue", None, 30)}
    assert "behind it" in runs[0].reason
    # of a top with one member behind and one at the trial's step, only the latter is a donor
    even = [member(0, {10: 1.0}), member(1, {10: 2.0, 20: 2.0}), member(2, {10: 3.0, 20: 9.0}), member(3, {10: 4.0})]
    runs = [decide(config(quantile=0.5), even, SegmentEnd(2, 20, 9.0), random.Random(s)) for s in range(30)]
    assert {(d.action, d.donor, d.start, d.budget) for d in runs} == {("exploit", 1, 20, 30)}


def test_an_exploit_charges_one_interval_from_the_donors_checkpoint() -> None:
    """What max_steps is charged for a relaunch is ``budget - start``: the steps
    trained from the checkpoint it resumes (the donor's), never the donor's
    history before it nor steps the trial trained already."""
    cfg = config(max=60, quantile=0.5)
    ahead = [member(0, {10: 1.0, 20: 0.8, 30: 0.5}), member(1, {10: 9.0})]
    d = decide(cfg, ahead, end(1, 9.0), random.Random(0))
    assert (d.action, d.donor, d.start, d.budget) == ("exploit", 0, 30, 40)  # trains 30-40: 10 steps, not 30
    spec = parse_spec({**SPACE_SPEC, "budget": {"max_steps": 100},
                       "strategy": {**SPACE_SPEC["strategy"], "population": 2, "quantile": 0.5,
                                    "interval": {"param": "steps", "every": 10, "max": 60}}})
    search = Search(spec)
    history = [TrialRecord(0, {**ahead[0].params, "steps": 30}, TrialState.RUNNING, rungs={10: 1.0, 20: 0.8, 30: 0.5}),
               TrialRecord(1, {**ahead[1].params, "steps": 10}, TrialState.RUNNING, rungs={})]
    v = search.on_run_end(history, history[1], 9.0)
    assert (v.action, v.donor, v.start, v.budget) == (Action.PROMOTE, 0, 30, 40)
    assert search.may_promote(Usage(launched=2, gpu_seconds=0.0, elapsed_seconds=0.0, steps=90.0), v.start, v.budget).ok
    refused = search.may_promote(Usage(launched=2, gpu_seconds=0.0, elapsed_seconds=0.0, steps=91.0), v.start, v.budget)
    assert not refused.ok and "101 expected" in refused.reason


def test_a_population_trains_each_step_once_and_stops_at_max() -> None:
    """A population driven through the stopper with plain events, its members'
    segment ends in random order: no relaunch resumes below the step its trial reached, each
    trains at most one interval, and every member ends at max; what the
    population trained is ``population * max`` less the steps exploits copied."""
    search = Search(parse_spec(SPACE_SPEC))  # population 8, every 10, max 30
    rng = random.Random(5)
    history = {i: TrialRecord(i, search.propose(i).params, TrialState.RUNNING) for i in range(8)}
    at = {i: 0 for i in range(8)}  # the step each member's checkpoint is at
    trained, copied = 0, 0
    while running := [r for r in history.values() if r.state == TrialState.RUNNING]:
        r = rng.choice(running)  # in any order: members ahead and behind
        budget = r.params["steps"]
        trained += budget - at[r.index]
        at[r.index] = budget
        v = search.on_run_end(list(history.values()), r, rng.random() + 1.0 / budget)
        rungs = {**r.rungs, budget: 0.0} if v.rung is None else {**r.rungs, v.rung: rng.random()}
        if v.action == Action.COMPLETE:
            history[r.index] = TrialRecord(r.index, r.params, TrialState.COMPLETED, rungs=rungs)
            continue
        assert v.action == Action.PROMOTE and v.budget is not None
        start = budget if v.start is None else v.start
        assert start >= budget and v.budget - start <= 10  # never behind itself; one interval at most
        if v.donor is not None:
            copied += start - budget
            at[r.index] = start
        history[r.index] = TrialRecord(r.index, {**r.params, **(v.params or {}), "steps": v.budget},
                                       TrialState.RUNNING, rungs=rungs)
    assert all(at[i] == 30 for i in range(8))
    assert trained == 8 * 30 - copied


def test_a_diverged_member_ranks_last_and_is_never_a_donor() -> None:
    pop = [member(0, {10: math.nan}), member(1, {10: 2.0}), member(2, {10: 3.0}), member(3, {10: 4.0})]
    d = decide(config(quantile=0.5), pop, end(0, math.nan), random.Random(0))
    assert d.action == "exploit" and d.donor in (1, 2)  # the top 2 are 1 and 2; nan is last
    assert {decide(config(quantile=0.5), pop, end(3, 4.0), random.Random(s)).donor for s in range(30)} == {1, 2}


def test_the_top_completes_at_max() -> None:
    d = decide(config(), population([1.0, 9.0], step=30), end(1, 9.0, step=30), random.Random(0))
    assert d.action == "complete"


def test_explore_perturbs_within_the_space_and_resamples_with_its_probability() -> None:
    cfg = config()
    draws = [explore(cfg, {"lr": 0.5, "layers": 3, "opt": "adam"}, random.Random(s)) for s in range(50)]
    assert {round(d["lr"], 9) for d in draws} == {0.4, 0.6}
    assert {d["opt"] for d in draws} == {"adam", "sgd"}  # the first entry's neighbours: itself (the end) and the next
    assert all(d["layers"] == 3 for d in draws)
    # kept inside a range's bounds
    assert {explore(cfg, {"lr": 0.95, "opt": "sgd"}, random.Random(s))["lr"] for s in range(30)} <= {0.76, 1.0}
    # an int range stays on its grid: 1, 3, 5, 7, 9
    ints = config(mutations={"layers": Mutation(factor=[0.5, 2.0])})
    assert {explore(ints, {"layers": 5}, random.Random(s))["layers"] for s in range(30)} == {3, 9}
    # resample_probability 1: every mutated param drawn afresh from the space
    always = config(resample_probability=1.0)
    fresh = [explore(always, {"lr": 0.5, "layers": 3, "opt": "adam"}, random.Random(s)) for s in range(40)]
    assert all(1e-4 <= d["lr"] <= 1.0 for d in fresh) and len({d["lr"] for d in fresh}) == 40
    assert {d["opt"] for d in fresh} == {"adam", "sgd", "lion"}
    # about a quarter resampled at 0.25
    some = config(resample_probability=0.25, mutations={"lr": Mutation(factor=[1.0])})
    resampled = sum(explore(some, {"lr": 0.5}, random.Random(s))["lr"] != 0.5 for s in range(400))
    assert 60 <= resampled <= 140


def test_a_seeded_rng_makes_every_decision_reproducible() -> None:
    pop = population([float(v) for v in range(8)])
    runs = [[decide(config(resample_probability=0.5), pop, end(i, float(i)), random.Random(f"s:{i}"))
             for i in range(8)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert {d.donor for d in runs[0] if d.action == "exploit"} <= {0, 1}


def test_the_planner_stopper_seeds_per_trial_and_interval_and_relaunches() -> None:
    search = Search(parse_spec(SPACE_SPEC))
    assert search.segmented and not search.waits and not search.wants_progress
    first = search.propose(0)
    assert first.params["steps"] == 10 and set(first.params) == {"lr", "layers", "opt", "steps"}
    history = [TrialRecord(i, {"lr": 0.1 * (i + 1), "layers": 3, "opt": "sgd", "steps": 10}, TrialState.RUNNING,
                           rungs={10: float(i)}) for i in range(8)]
    worst = TrialRecord(7, history[7].params, TrialState.RUNNING, rungs={})
    verdicts = [search.on_run_end(history, worst, 7.0) for _ in range(3)]
    assert verdicts[0] == verdicts[1] == verdicts[2]  # a planner after a restart decides the same
    v = verdicts[0]
    assert (v.action, v.rung, v.budget, v.relaunch) == (Action.PROMOTE, 10, 20, True)
    assert v.donor in (0, 1) and v.params is not None and v.params["layers"] == 3
    best = search.on_run_end(history, TrialRecord(0, history[0].params, TrialState.RUNNING), 0.0)
    assert (best.action, best.budget, best.donor, best.params) == (Action.PROMOTE, 20, None, None)
    last = search.on_run_end(history, TrialRecord(0, {**history[0].params, "steps": 30}, TrialState.RUNNING), 0.0)
    assert (last.action, last.rung) == (Action.COMPLETE, 30)
