"""Median stopping: the same decisions as Optuna's MedianPruner on the same history."""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState as OS
from optuna.trial import create_trial

from spotsweep.services.planner.search import Action, Median, TrialRecord
from spotsweep.shared.spec import MedianStop
from spotsweep.shared.states import TrialState


def completed(i: int, curve: dict[int, float]) -> TrialRecord:
    return TrialRecord(i, {}, TrialState.COMPLETED, (curve[max(curve)],), curve=curve, last_step=max(curve))


def test_worse_than_the_median_at_that_step_is_stopped() -> None:
    median = Median(MedianStop(startup_trials=2), "min")
    others = [completed(i, {1: a, 2: b, 3: b}) for i, (a, b) in enumerate([(1.0, 0.8), (2.0, 1.6), (3.0, 2.4)])]
    # Optuna compares the trial's best value so far: 1.5 at step 1 is under the median 1.6 at step 2.
    assert median.decide(others, TrialRecord(3, {}, TrialState.RUNNING, curve={1: 1.5}), 2, 1.7).action == Action.CONTINUE
    assert median.decide(others, TrialRecord(3, {}, TrialState.RUNNING), 2, 1.7).action == Action.PRUNE
    assert median.decide(others, TrialRecord(3, {}, TrialState.RUNNING), 2, 1.5).action == Action.CONTINUE
    assert median.decide(others[:1], TrialRecord(3, {}, TrialState.RUNNING), 2, 9.0).action == Action.CONTINUE  # startup
    assert median.decide(others, TrialRecord(3, {}, TrialState.RUNNING), 5, 9.0).action == Action.CONTINUE  # nobody at 5
    assert Median(MedianStop(startup_trials=0), "max").decide(others, TrialRecord(3, {}, TrialState.RUNNING), 2, 1.5).action \
        == Action.PRUNE


def _optuna_prunes(stop: MedianStop, history: list[TrialRecord], me: TrialRecord, step: int, value: float) -> bool:
    pruner = optuna.pruners.MedianPruner(n_startup_trials=stop.startup_trials, n_warmup_steps=stop.warmup_steps,
                                         interval_steps=stop.interval_steps, n_min_trials=stop.min_trials)
    study = optuna.create_study(pruner=pruner)
    dist = {"x": FloatDistribution(0, 1)}
    for r in history:
        state = {TrialState.COMPLETED: OS.COMPLETE, TrialState.PRUNED: OS.PRUNED}.get(r.state, OS.RUNNING)
        study.add_trial(create_trial(state=state, value=r.values[0] if state == OS.COMPLETE and r.values else None,
                                     params={"x": 0.5}, distributions=dist, intermediate_values=dict(r.curve)))
    trial = study.ask()
    for s, v in {**me.curve, step: value}.items():
        trial.report(v, s)
    return trial.should_prune()


@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_optuna_median_pruner(seed: int) -> None:
    rng = random.Random(seed)
    stop = MedianStop(startup_trials=rng.choice([0, 2, 5]), warmup_steps=rng.choice([0, 3]), interval_steps=rng.choice([1, 2, 3]),
                      min_trials=rng.choice([1, 3]))
    history = []
    for i in range(rng.randint(1, 9)):
        state = rng.choice([TrialState.COMPLETED, TrialState.COMPLETED, TrialState.PRUNED, TrialState.RUNNING])
        steps = range(rng.randint(2, 10))
        curve = {s: rng.random() + 1 / (s + 1) for s in steps}
        if rng.random() < 0.1:
            curve[rng.choice(list(steps))] = math.nan
        history.append(TrialRecord(i, {}, state, (curve[max(curve)],) if state == TrialState.COMPLETED else None, curve=curve,
                                   last_step=max(curve)))
    agree = 0
    for _ in range(40):
        past = {s: rng.random() + 1 / (s + 1) for s in sorted(rng.sample(range(10), rng.randint(0, 4)))}
        step = max(past, default=-1) + rng.randint(1, 3)
        me = TrialRecord(99, {}, TrialState.RUNNING, curve=past)
        value = rng.random() + 1 / (step + 1)
        ours = Median(stop, "min").decide(history, me, step, value).action == Action.PRUNE
        ended = [max(r.curve) for r in history if r.state == TrialState.COMPLETED]
        if ended and step >= max(ended):  # where the completed runs ended, never stopped (Optuna would)
            assert not ours, (stop, step, value, past)
        else:
            assert ours == _optuna_prunes(stop, history, me, step, value), (stop, step, value, past)
        agree += 1
    assert agree == 40


def test_a_progress_event_of_several_steps_is_judged_at_its_first_step_in_each_interval() -> None:
    # The planner records an event's points (steps 1..7) in the trial's curve before judging each of them.
    stop = MedianStop(startup_trials=1, interval_steps=10, min_trials=1)
    others = [completed(0, {s: 1.0 for s in range(1, 30)})]
    event = {s: 2.0 for s in range(1, 8)}  # worse than the median at every step
    me = TrialRecord(1, {}, TrialState.RUNNING, curve=event)
    verdicts = [Median(stop, "min").decide(others, me, s, v).action for s, v in event.items()]
    assert verdicts[0] == Action.PRUNE and _optuna_prunes(stop, others, TrialRecord(1, {}, TrialState.RUNNING), 1, 2.0)
    assert verdicts[1:] == [Action.CONTINUE] * 6  # 2..7 are not the first report in [0, 10)
    # Later points of the same event do not count as the trial's best value so far.
    better_later = TrialRecord(1, {}, TrialState.RUNNING, curve={1: 2.0, 2: 0.1})
    assert Median(MedianStop(startup_trials=1, min_trials=1), "min").decide(others, better_later, 1, 2.0).action == Action.PRUNE


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_optuna_when_the_curve_already_holds_the_rest_of_the_event(seed: int) -> None:
    rng = random.Random(100 + seed)
    stop = MedianStop(startup_trials=1, warmup_steps=rng.choice([0, 2]), interval_steps=rng.choice([2, 3, 5, 10]), min_trials=1)
    history = [completed(i, {s: rng.random() + 1 / (s + 1) for s in range(0, 40)}) for i in range(3)]
    event = {s: rng.random() + 1 / (s + 1) for s in sorted(rng.sample(range(40), 12))}
    me = TrialRecord(9, {}, TrialState.RUNNING, curve=event)
    for step, value in event.items():
        before = TrialRecord(9, {}, TrialState.RUNNING, curve={s: v for s, v in event.items() if s < step})
        ours = Median(stop, "min").decide(history, me, step, value).action == Action.PRUNE
        assert ours == _optuna_prunes(stop, history, before, step, value), (stop, step)


def test_a_trial_is_never_stopped_at_the_step_where_the_completed_runs_ended() -> None:
    """Its run is done: a stop there saves nothing and turns a finished run into a pruned one (issue 40)."""
    median = Median(MedianStop(startup_trials=1), "min")
    others = [completed(0, {10: 1.0, 20: 0.5}), completed(1, {10: 1.2, 20: 0.6})]
    assert median.decide(others, TrialRecord(2, {}, TrialState.RUNNING, curve={10: 3.0}), 10, 3.0).action == Action.PRUNE
    at_end = median.decide(others, TrialRecord(2, {}, TrialState.RUNNING, curve={10: 1.1}), 20, 0.9)
    assert at_end.action == Action.CONTINUE and "last step" in at_end.reason


@pytest.mark.parametrize("mode", ["min", "max"])
def test_a_diverged_trial_is_stopped_whichever_sign_its_infinity_has(mode: str) -> None:
    """-inf loss (min) or +inf score (max) is a diverged run, not the best one: it never passes the median,
    and a completed trial that diverged is left out of the median instead of dragging it."""
    median = Median(MedianStop(startup_trials=0), mode)
    others = [completed(i, {1: v, 5: v}) for i, v in enumerate([1.0, 2.0, 3.0])]  # judged at 1, before their end
    best_looking = -math.inf if mode == "min" else math.inf
    for value in (best_looking, -best_looking, math.nan):
        decided = median.decide(others, TrialRecord(3, {}, TrialState.RUNNING), 1, value)
        assert decided.action == Action.PRUNE and "NaN or infinite" in decided.reason, (value, decided)
    good = 1.5 if mode == "min" else 2.5  # better than the median 2 of the finite values
    with_diverged = [*others, completed(4, {1: best_looking, 5: 1.0}), completed(5, {1: best_looking, 5: 1.0})]
    assert median.decide(with_diverged, TrialRecord(6, {}, TrialState.RUNNING), 1, good).action == Action.CONTINUE
    worse = 2.5 if mode == "min" else 1.5
    assert median.decide(with_diverged, TrialRecord(6, {}, TrialState.RUNNING), 1, worse).action == Action.PRUNE
