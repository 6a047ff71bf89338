"""PBT vs random vs ASHA where a learning-rate schedule wins (issue 21, "Show it").

The objective is a state-based training model, not a curve of (config,
step): a trial's loss at step ``t`` comes from replaying the learning rates
it trained with (its checkpoint *is* that history), so a trial that copies
another's checkpoint continues from the other's state. Per step, with
learning rate ``lr`` and batch ``b``:

    x <- x * exp(-0.5 * lr)                    (distance to the optimum; x0 = 2)
    v <- v + 0.3 * (0.5 * sqrt(64 / b) * lr - v)   (the noise ball: follows lr)
    loss = x + v + N(0, 0.005)

and a rate above ``0.4 * sqrt(b / 32)`` diverges (x grows by half each step,
up to 5). A large rate closes ``x`` fast but holds the loss on a high noise
ball; a small one has a low ball and closes ``x`` slowly; a high rate then a
low one beats every constant rate, as step decay does in real training.
The best constant config is computed (lr on a fine log grid, every batch)
so a reader can see what a schedule is worth.

All three at the same step budget (16 trials' worth of ``MAX_T`` = 54 steps,
8 trials at once), through spotsweep's decision objects: ``random`` (16
trials, constant params), ``asha`` (budgets 6/18/54, eta 3, random configs,
promotions resume from the checkpoint) and ``pbt`` (population 16, every 6
steps, quantile 0.25, lr multiplied by 0.8 or 1.2 and batch moved to a
neighbour, resample probability 0.25): ``Search.on_run_end`` returns
PROMOTE with the next budget, and for an exploit the donor (whose latest
segment-end checkpoint the trial continues from, as the planner copies its
latest checkpoint) and the explored params.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from search_peers import StepPool, drive
from spotsweep.services.planner.search import Action, Search, TrialRecord
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

MAX_T, EVERY, POPULATION, WORKERS = 54, 6, 16, 8
CAP = POPULATION * MAX_T  # 864 steps for every method
BATCHES = [32, 64, 128, 256]
SPACE: dict[str, Any] = {"lr": {"type": "loguniform", "low": 1e-3, "high": 1.0}, "batch": BATCHES}
Schedule = Sequence[tuple[float, int]]  # (lr, batch) per step trained


def true_loss(schedule: Schedule) -> float:
    x, v = 2.0, 0.0
    for lr, batch in schedule:
        if lr > 0.4 * math.sqrt(batch / 32):
            x = min(5.0, x * 1.5)
        else:
            x *= math.exp(-0.5 * lr)
        v += 0.3 * (0.5 * math.sqrt(64 / batch) * lr - v)
    return x + v


def observed(schedule: Schedule, seed: int, trial: int) -> float:
    return true_loss(schedule) + random.Random(f"pbt:{seed}:{trial}:{len(schedule)}").gauss(0.0, 0.005)


def best_constant() -> tuple[float, dict[str, Any]]:
    """The best constant (lr, batch) at MAX_T: lr on a log grid of 400 points."""
    best = min((true_loss([(10 ** (-3 + 3 * k / 399), b)] * MAX_T), 10 ** (-3 + 3 * k / 399), b)
               for k in range(400) for b in BATCHES)
    return best[0], {"lr": best[1], "batch": best[2]}


def spec(strategy: dict[str, Any]) -> Any:
    command = ["python", "train.py"] + (["{steps}"] if strategy["type"] != "random" else [])
    return parse_spec({"name": "pbt-bench", "command": command, "metric": {"name": "loss"},
                       "space": SPACE, "strategy": strategy, "max_concurrent": WORKERS})


def run_constant(strategy: dict[str, Any], seed: int) -> tuple[StepPool, dict[int, list[tuple[float, int]]]]:
    """random or asha: every trial trains with its params unchanged (a promotion resumes its own history)."""
    histories: dict[int, list[tuple[float, int]]] = {}

    def value(index: int, params: dict[str, Any], reached: int) -> tuple[str, float]:
        histories[index] = [(params["lr"], params["batch"])] * reached
        return str(index), observed(histories[index], seed, index)

    pool = StepPool(WORKERS, CAP)
    drive(Search(spec(strategy)), pool, value, MAX_T)
    return pool, histories


def run_pbt(strategy: dict[str, Any], seed: int, cap: float = CAP) -> tuple[StepPool, dict[int, list[tuple[float, int]]]]:
    """spotsweep's PBT: members queue for a free slot; an exploit continues from the donor's latest segment end
    (never behind the trial, so a population trains at most ``population * max``, less what exploits copy)."""
    search = Search(spec(strategy))
    pool = StepPool(WORKERS, cap)
    records: dict[int, TrialRecord] = {}
    histories: dict[int, list[tuple[float, int]]] = {}
    checkpoints: dict[int, list[tuple[float, int]]] = {}  # each member's latest segment end
    waiting: deque[tuple[int, int]] = deque()  # (member, steps to train) ready for a slot
    nxt = [0]

    def launch() -> bool:
        if nxt[0] < search.total_trials:
            i = nxt[0]
            nxt[0] += 1
            params = search.propose(i, list(records.values())).params
            records[i], histories[i] = TrialRecord(i, params, TrialState.RUNNING), []
            waiting.append((i, params["steps"]))
        while waiting:
            i, steps = waiting.popleft()
            if pool.fits(steps):
                pool.start(steps, i)
                return True
            end(i, observed(histories[i], seed, i))  # past the cap: completes where it is, as the planner does
        return False

    def end(i: int, value: float) -> None:
        records[i] = TrialRecord(i, records[i].params, TrialState.COMPLETED, (value,), rungs=records[i].rungs)
        pool.ended.append((str(i), value, len(histories[i])))

    def done(i: int) -> None:
        r = records[i]
        target = r.params["steps"]
        histories[i] += [(r.params["lr"], r.params["batch"])] * (target - len(histories[i]))
        checkpoints[i] = list(histories[i])
        value = observed(histories[i], seed, i)
        d = search.on_run_end(list(records.values()), r, value)
        rungs = {**r.rungs, d.rung: value} if d.rung is not None else dict(r.rungs)
        if d.action != Action.PROMOTE or d.budget is None:
            records[i] = TrialRecord(i, r.params, TrialState.COMPLETED, (value,), rungs=rungs)
            pool.ended.append((str(i), value, len(histories[i])))
            return
        params = {**r.params, **(d.params or {})}
        if d.donor is not None:
            histories[i] = list(checkpoints[d.donor])
        budget = max(d.budget, min(len(histories[i]) + EVERY, MAX_T))  # a donor ahead: one more segment
        records[i] = TrialRecord(i, {**params, "steps": budget}, TrialState.RUNNING, rungs=rungs)
        if len(histories[i]) >= MAX_T:  # the donor's checkpoint was already final
            end(i, observed(histories[i], seed, i))
            return
        waiting.append((i, budget - len(histories[i])))

    pool.run(launch, done)
    return pool, histories


def pbt_strategy(seed: int, every: int = EVERY, population: int = POPULATION) -> dict[str, Any]:
    return {"type": "pbt", "population": population, "seed": seed,
            "interval": {"param": "steps", "every": every, "max": MAX_T}, "quantile": 0.25,
            "resample_probability": 0.25, "mutations": {"lr": {"factor": [0.8, 1.2]}, "batch": {"values": BATCHES}}}


def methods() -> dict[str, Callable[[int], tuple[StepPool, dict[int, list[tuple[float, int]]]]]]:
    return {
        "random (16 trials)": lambda s: run_constant({"type": "random", "trials": POPULATION, "seed": s}, s),
        "asha (6/18/54)": lambda s: run_constant({"type": "asha", "budget": {"param": "steps", "min": 6, "max": MAX_T},
                                                  "eta": 3, "trials": 1000, "sampler": "random", "seed": s}, s),
        "pbt (every 6)": lambda s: run_pbt(pbt_strategy(s), s),
        "pbt (every 18)": lambda s: run_pbt(pbt_strategy(s, 18), s),
        "pbt (every 6, 8 members)": lambda s: run_pbt(pbt_strategy(s, population=8), s),
    }


def pbt_bench(seeds: int) -> dict[str, Any]:
    constant, config = best_constant()
    print(f"lr-schedule model, {POPULATION * MAX_T} steps for each method ({POPULATION} trials of {MAX_T}), "
          f"{WORKERS} at once, {seeds} seeds; best constant config {config['lr']:.3g}/{config['batch']}: "
          f"{constant:.4f} at {MAX_T}")
    print(f"{'method':<26}{'true loss':>10}{'sd':>8}{'IQR':>16}{'vs const':>10}{'steps':>7}{'done':>6}{'beat const':>12}"
          f"  stopped")
    out: dict[str, Any] = {"best_constant": {"loss": constant, **config}, "cap": CAP, "methods": {}}
    for name, fn in methods().items():
        runs: list[dict[str, Any]] = []
        for seed in range(seeds):
            pool, histories = fn(seed)
            picked = min(pool.ended, key=lambda f: f[1])[0] if pool.ended else None
            loss = true_loss(histories[int(picked)]) if picked is not None else math.nan
            lrs = [lr for lr, _ in histories[int(picked)]] if picked is not None else []
            at_max = sum(reached >= MAX_T for _, _, reached in pool.ended)
            # Why it stopped: a member ended short of MAX_T (the cap), or every member reached it (the population).
            stopped = ("cap" if at_max < len(pool.ended) else "every member at max") if name.startswith("pbt") else "-"
            runs.append({"seed": seed, "true_loss": loss, "steps": pool.committed, "completed": at_max, "stopped": stopped,
                         "lr_first": lrs[0] if lrs else None, "lr_last": lrs[-1] if lrs else None})
        losses: list[float] = [r["true_loss"] for r in runs]
        q = statistics.quantiles(losses, n=4, method="inclusive") if len(losses) > 1 else [losses[0]] * 3
        mean = statistics.fmean(losses)
        sd = statistics.stdev(losses) if len(losses) > 1 else 0.0
        beat = sum(x < constant for x in losses)
        why = sorted({r["stopped"] for r in runs})  # PBT's only: the others run a fixed design
        print(f"{name:<26}{mean:>10.4f}{sd:>8.4f}{f'{q[0]:.4f}-{q[2]:.4f}':>16}{mean / constant:>9.2f}x"
              f"{statistics.fmean(r['steps'] for r in runs):>7.0f}{statistics.fmean(r['completed'] for r in runs):>6.1f}"
              f"{f'{beat}/{seeds}':>12}  {' / '.join(why)}")
        out["methods"][name] = {"mean": mean, "sd": sd, "iqr": [q[0], q[2]], "beat_constant": beat, "runs": runs}
    print("true loss: noise-free, of the trial each method picks (best observed at the end); vs const: over the "
          "best constant config's; done: members or trials that trained all 54 steps; beat const: seeds below it; "
          "stopped: the cap, or every member reached max (a population trains at most population x 54 steps)")
    return out
