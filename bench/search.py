"""Search strategies on one objective: best value found against GPU-steps spent.

The objective is a learning-curve MODEL WITH NOISE, not real training (a
run of real training per strategy and seed would take hours): for params
``lr``, ``batch``, ``depth`` and ``warmup`` the loss at step ``t`` (1..81,
in units of 100 training steps) is

    floor(lr, batch, depth, warmup) + A(depth) * t ** -speed(lr) + N(0, 0.02)

with the best ``lr`` growing with ``sqrt(batch)``, larger learning rates
converging faster to a worse floor (so early and final rankings differ, as
they do in training) and large rates without warm-up unstable.

Every strategy runs in the same simulated asynchronous pool of ``--workers``
GPUs under the same budget of GPU-steps, through spotsweep's own decision
objects (``Search.propose`` / ``Search.on_run_end``, as the planner will
call them): grid (in grid order), random, subset, tpe (history with trials
in flight, constant liar) and asha (promotion = relaunch from a checkpoint,
costing ``--resume-cost`` steps). The peer is Optuna alone: a study with its
TPESampler and HyperbandPruner, asked and told in the same pool, a trial
reporting every step and stopped when ``should_prune()``. A trial counts as
found when it completed the full 81 steps; "best" is its observed final loss.

    python bench/search.py --seeds 3 --json bench/results/search.json

The other sections (issues 21 and 33): ``--grid27`` (ASHA's order,
promotion rule and sampler on the 27-config grid, below; picks judged by
noise-free values, reaching full length and being picked counted apart),
``--peers`` (bench/search_peers.py: against Optuna and Ray Tune at equal
step budgets on held-out objectives), ``--pbt`` (bench/search_pbt.py: PBT
vs random vs ASHA on a stateful model where a learning-rate schedule wins),
``--continuous`` (below: asha's random configs against BOHB's rule on
multi-fidelity Hartmann 3); ``--all`` runs every section, as ``make
bench`` does:

    python bench/search.py --all --seeds 10 --json bench/results/search.json
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

import harness
import optuna
from search_objectives import HARTMANN3_MIN, hartmann3
from search_pbt import pbt_bench
from search_peers import peers

from spotsweep.services.planner.search import Action, Search, TrialRecord
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

MAX_T = 81
NOISE = 0.02
SPACE: dict[str, Any] = {
    "lr": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "batch": [32, 64, 128, 256],
    "depth": {"type": "int", "low": 2, "high": 12, "step": 2},
    "warmup": [0, 5, 20],
}  # 6 * 4 * 6 * 3 = 432 configurations


def true_loss(p: dict[str, Any], t: float) -> float:
    gap = math.log10(p["lr"]) - (-2.7 + 0.5 * math.log10(p["batch"] / 64))
    floor = 1.8 + 0.35 * gap**2 + 0.6 / math.sqrt(p["depth"]) + 0.002 * p["depth"]
    if p["warmup"] == 0 and gap > 0.4:
        floor += 0.9 * (gap - 0.4)  # unstable without warm-up
    speed = 0.35 + 0.35 * min(max(gap + 1.5, 0.0), 2.5) / 2.5
    t_eff = max(1.0, t - p["warmup"] / 2)
    return floor + 4.0 * (1 + p["depth"] / 24) * t_eff ** -speed


def observe(p: dict[str, Any], t: float, key: str, seed: int) -> float:
    return true_loss(p, t) + random.Random(f"{seed}:{key}:{t}").gauss(0, NOISE)


@dataclass
class Pool:
    """A simulated pool of GPUs: jobs of so many steps, run asynchronously in time order."""

    workers: int
    budget: float  # GPU-steps; no job starts once they are spent
    now: float = 0.0
    spent: float = 0.0
    events: list[tuple[float, int, Any]] = field(default_factory=list)
    found: list[tuple[float, float, float]] = field(default_factory=list)  # (gpu-steps then, observed, true)
    _seq: int = 0

    def busy(self) -> int:
        return len(self.events)

    def start(self, steps: float, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (self.now + steps, self._seq, payload))

    def run(self, launch: Callable[[], bool], done: Callable[[Any], None]) -> None:
        while True:
            while self.busy() < self.workers and self.spent < self.budget and launch():
                pass
            if not self.events:
                return
            at, _, payload = heapq.heappop(self.events)
            self.spent += (at - self.now) * (self.busy() + 1)
            self.now = at
            done(payload)


def spec_for(strategy: dict[str, Any]) -> Any:
    command = ["python", "train.py", "{lr}", "{batch}", "{depth}", "{warmup}", "{steps}"]
    return parse_spec({"name": "bench", "command": command if strategy["type"] == "asha" else command[:-1],
                       "metric": {"name": "loss"}, "space": SPACE, "strategy": strategy, "max_concurrent": 8})


def run_ours(strategy: dict[str, Any], workers: int, budget: float, seed: int, resume_cost: float) -> Pool:
    search = Search(spec_for(strategy))
    pool = Pool(workers, budget)
    records: dict[int, TrialRecord] = {}
    attrs: dict[str, Any] = {}
    next_index = [0]

    def launch() -> bool:
        # A free slot goes to a waiting trial that ranks first (ASHA's paper rule), as the planner's top-up does.
        final = next_index[0] >= search.total_trials and pool.busy() == 0
        for p in search.promotions(list(records.values()), 1, final):
            r = records[p.index]
            records[p.index] = TrialRecord(p.index, {**r.params, "steps": p.budget}, TrialState.RUNNING, rungs=r.rungs,
                                           attrs=r.attrs)
            pool.start(p.budget - p.rung + resume_cost, p.index)
            return True
        i = next_index[0]
        if i >= search.total_trials:
            return False
        proposal = search.propose(i, list(records.values()), attrs)
        attrs.update(proposal.study_attrs or {})
        records[i] = TrialRecord(i, proposal.params, TrialState.RUNNING, attrs=proposal.attrs)
        next_index[0] += 1
        pool.start(proposal.params.get("steps", MAX_T), i)
        return True

    def done(i: int) -> None:
        r = records[i]
        budget_now = r.params.get("steps", MAX_T)
        value = observe(r.params, budget_now, str(i), seed)
        d = search.on_run_end(list(records.values()), r, value)
        rungs = {**r.rungs, d.rung: value} if d.rung is not None else dict(r.rungs)
        if d.action == Action.PROMOTE and d.budget is not None:
            records[i] = TrialRecord(i, {**r.params, "steps": d.budget}, TrialState.RUNNING, rungs=rungs, attrs=r.attrs)
            pool.start(d.budget - budget_now + resume_cost, i)  # the same trial, resumed from its checkpoint
            return
        if d.action == Action.PAUSE:  # waits at its rung for a promotion (launch above)
            records[i] = TrialRecord(i, r.params, TrialState.PAUSED, (value,), rungs=rungs, attrs=r.attrs)
            return
        state = TrialState.PRUNED if d.action == Action.PRUNE else TrialState.COMPLETED
        records[i] = TrialRecord(i, r.params, state, (value,), rungs=rungs, attrs=r.attrs)
        if state == TrialState.COMPLETED:
            pool.found.append((pool.spent, value, true_loss(r.params, MAX_T)))

    pool.run(launch, done)
    return pool


def run_optuna(workers: int, budget: float, seed: int) -> Pool:
    """The peer: Optuna's TPE + HyperbandPruner, every step reported."""
    sampler = optuna.samplers.TPESampler(seed=seed)
    pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=MAX_T, reduction_factor=3)
    study = optuna.create_study(sampler=sampler, pruner=pruner)
    dists = {"lr": optuna.distributions.CategoricalDistribution(SPACE["lr"]),
             "batch": optuna.distributions.CategoricalDistribution(SPACE["batch"]),
             "depth": optuna.distributions.IntDistribution(2, 12, step=2),
             "warmup": optuna.distributions.CategoricalDistribution(SPACE["warmup"])}
    pool = Pool(workers, budget)

    def launch() -> bool:
        trial = study.ask(dists)
        pool.start(1, (trial, 1))
        return True

    def done(payload: tuple[optuna.Trial, int]) -> None:
        trial, t = payload
        value = observe(trial.params, t, str(trial.number), seed)
        trial.report(value, t)
        if t >= MAX_T:
            study.tell(trial, value)
            pool.found.append((pool.spent, value, true_loss(trial.params, MAX_T)))
        elif trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            pool.start(1, (trial, t + 1))

    pool.run(launch, done)
    return pool


def best_at(pool: Pool, spent: float) -> tuple[float, float] | None:
    found = [(obs, true) for at, obs, true in pool.found if at <= spent]
    return min(found) if found else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, help="trials at once (default 8; 4 for --grid27 and --peers)")
    ap.add_argument("--trials-budget", type=int, default=60, help="GPU-steps budget in full trials (of 81 steps)")
    ap.add_argument("--resume-cost", type=float, default=0.5, help="steps lost per ASHA relaunch (restart, checkpoint load)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--grid27", action="store_true", help="only ASHA's variants on the 27-config grid (issue 21)")
    ap.add_argument("--peers", action="store_true",
                    help="spotsweep vs Optuna and Ray Tune at equal step budgets on held-out objectives (bench/search_peers.py)")
    ap.add_argument("--cap", type=float, default=729, help="--peers: the step cap of every run")
    ap.add_argument("--methods", help="--peers: only these of spotsweep's and Optuna's methods, comma-separated by name")
    ap.add_argument("--no-ray", action="store_true", help="--peers: leave Ray Tune out (no peer virtualenv built)")
    ap.add_argument("--pbt", action="store_true", help="PBT vs random vs ASHA on an lr-schedule model (bench/search_pbt.py)")
    ap.add_argument("--continuous", action="store_true", help="asha random vs tpe (BOHB) on multi-fidelity Hartmann 3")
    ap.add_argument("--all", action="store_true", help="every section above, one after the other (make bench)")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sections: dict[str, Callable[[], Any]] = {
        "strategies": lambda: strategies(args),
        "grid27": lambda: grid27(args.seeds, args.workers or 4),
        "peers": lambda: peers(args.seeds, args.workers or 4, args.cap, not args.no_ray,
                               [m.strip() for m in args.methods.split(",")] if args.methods else None),
        "pbt": lambda: pbt_bench(args.seeds),
        "continuous": lambda: continuous(args.seeds, args.workers or 4),
    }
    chosen = [name for name in sections if args.all or getattr(args, name, False)] or ["strategies"]
    out: dict[str, Any] = {"seeds": args.seeds}
    for name in chosen:
        print(f"\n== {name} ==")
        started = time.perf_counter()
        out[name] = sections[name]()
        print(f"({name}: {time.perf_counter() - started:.0f} s)")
        if args.json:  # written after each section, so a long run keeps what it finished
            harness.write_json("search", out, args.json)


def strategies(args: argparse.Namespace) -> dict[str, Any]:
    """The original comparison: grid, random, subset, tpe, asha and Optuna on the 432-config curve model."""
    workers = args.workers or 8
    budget = args.trials_budget * MAX_T
    marks = [budget / 4, budget / 2, 3 * budget / 4, budget]
    grid_all = parse_spec({"name": "g", "command": ["t"], "metric": {"name": "loss"}, "space": SPACE})
    methods: dict[str, Callable[[int], Pool]] = {
        "grid": lambda s: run_ours({"type": "grid"}, workers, budget, s, args.resume_cost),
        "random": lambda s: run_ours({"type": "random", "trials": 432, "seed": s}, workers, budget, s, args.resume_cost),
        "subset": lambda s: run_ours({"type": "subset", "trials": args.trials_budget, "seed": s}, workers, budget, s,
                                     args.resume_cost),
        "tpe": lambda s: run_ours({"type": "tpe", "trials": 432, "seed": s}, workers, budget, s, args.resume_cost),
        "asha": lambda s: run_ours({"type": "asha", "budget": {"param": "steps", "min": 1, "max": MAX_T}, "eta": 3,
                                    "trials": 2000, "sampler": "random", "seed": s}, workers, budget, s, args.resume_cost),
        "optuna tpe+hyperband": lambda s: run_optuna(workers, budget, s),
    }
    print(f"objective: learning-curve model with noise (sd {NOISE}), not real training; {workers} workers; "
          f"budget {budget:.0f} GPU-steps = {args.trials_budget} full trials of {MAX_T} steps; 432-config space")
    optimum = min(true_loss(dict(zip(SPACE, c)), MAX_T) for c in _grid_points(grid_all))
    print(f"true optimum of the space at {MAX_T} steps: {optimum:.4f}; full grid costs {432 * MAX_T} GPU-steps")
    results: dict[str, Any] = {}
    header = "".join(f"{f'@{m:.0f}':>12}" for m in marks)
    print(f"{'method':<22}{'seed':>5}{header}{'trials done':>13}{'true loss':>11}{'wall s':>8}")
    for name, fn in methods.items():
        results[name] = []
        for seed in range(args.seeds):
            start = time.perf_counter()
            pool = fn(seed)
            wall = time.perf_counter() - start
            bests = [best_at(pool, m) for m in marks]
            cells = "".join(f"{b[0]:>12.4f}" if b else f"{'-':>12}" for b in bests)
            final = bests[-1]
            print(f"{name:<22}{seed:>5}{cells}{len(pool.found):>13}{(final[1] if final else float('nan')):>11.4f}{wall:>8.1f}")
            results[name].append({"seed": seed, "best_observed": [b[0] if b else None for b in bests],
                                  "best_true": [b[1] if b else None for b in bests], "completed": len(pool.found),
                                  "gpu_steps": pool.spent, "wall_s": wall})
    print("columns: best observed final loss among trials that ran all 81 steps, by GPU-steps spent (lower is better)")
    print(f"\nmean over {args.seeds} seed(s): TRUE loss of the trial each method would pick, by GPU-steps (optimum {optimum:.4f})")
    print(f"{'method':<22}{header}{'regret':>10}")
    for name, runs in results.items():
        means = []
        for k in range(len(marks)):
            values = [r["best_true"][k] for r in runs if r["best_true"][k] is not None]
            means.append(sum(values) / len(values) if len(values) == len(runs) else None)
        cells = "".join(f"{m:>12.4f}" if m is not None else f"{'-':>12}" for m in means)
        regret = f"{means[-1] - optimum:>10.4f}" if means[-1] is not None else f"{'-':>10}"
        print(f"{name:<22}{cells}{regret}")
    return {"objective": "learning-curve model with noise", "noise_sd": NOISE, "workers": workers,
            "budget_gpu_steps": budget, "marks": marks, "true_optimum": optimum, "results": results}


GRID27: dict[str, Any] = {"lr": [1e-3, 3e-3, 1e-2], "batch": [32, 128, 256], "depth": [2, 6, 12]}  # 27 configs


def curve_model(p: dict[str, Any], steps: int, seed: int, noise: bool = True) -> float:
    """The learning-curve model above on the 27-grid, 27 budget units = 81 of its steps."""
    return true_loss({**p, "warmup": 5}, steps * 3) + (_noise(p, steps, seed) if noise else 0.0)


def power_law(p: dict[str, Any], steps: int, seed: int, noise: bool = True) -> float:
    """A held-out objective the search code was not tuned on: each config a power-law
    curve a + b * t**-c with a, b, c drawn per (config, seed), so curves cross."""
    rng = random.Random(f"pl:{seed}:{sorted(p.items())}")
    a, b, c = rng.uniform(0.5, 1.5), rng.uniform(0.5, 3.0), rng.uniform(0.3, 1.2)
    return a + b * steps ** -c + (_noise(p, steps, seed) if noise else 0.0)


def _noise(p: dict[str, Any], steps: int, seed: int) -> float:
    return random.Random(f"{seed}:{sorted(p.items())}:{steps}").gauss(0, NOISE)


@dataclass(frozen=True)
class Grid27Run:
    """One ASHA sweep over the 27-grid, judged by noise-free values at 27."""

    steps: float  # steps trained
    reached: bool  # the config best at 27 (noise-free) trained to 27
    picked: bool  # ... and it is the one picked: the best observed among those that reached 27
    regret: float  # the picked config's noise-free value at 27 over the best config's


def grid27_run(objective: Callable[..., float], strategy: dict[str, Any], seed: int, workers: int) -> Grid27Run:
    """One ASHA sweep over the 27-grid (budgets 3/9/27, eta 3, promotions resume from the
    checkpoint): the steps it trains, whether the config best at 27 completed and was picked."""
    trained, records = asha_sweep(GRID27, lambda p, t: objective(p, t, seed), strategy, workers)

    def truth(config: dict[str, Any]) -> float:
        return objective(config, 27, seed, noise=False)

    best = min((dict(zip(GRID27, c)) for c in _product(GRID27)), key=truth)
    full = [r for r in records.values() if r.state == TrialState.COMPLETED]
    pick = {k: min(full, key=lambda r: r.values[0]).params[k] for k in GRID27}
    reached = any({k: r.params[k] for k in GRID27} == best for r in full)
    return Grid27Run(trained, reached, pick == best, truth(pick) - truth(best))


def asha_sweep(space: dict[str, Any], observe_at: Callable[[dict[str, Any], int], float], strategy: dict[str, Any],
               workers: int) -> tuple[float, dict[int, TrialRecord]]:
    """One sweep of an asha ``strategy`` (budget param ``steps``) in a pool of ``workers``, a run's value
    ``observe_at(config, steps)``: the steps it trains and its trials, as the planner would leave them."""
    spec = parse_spec({"name": "asha", "command": ["t", "{steps}"], "metric": {"name": "loss"}, "space": space,
                       "max_concurrent": workers, "strategy": strategy})
    search = Search(spec)
    pool = Pool(workers, float("inf"))
    records: dict[int, TrialRecord] = {}
    trained = [0.0]
    nxt = [0]

    def launch() -> bool:
        final = nxt[0] >= search.total_trials and pool.busy() == 0
        for pr in search.promotions(list(records.values()), 1, final):
            r = records[pr.index]
            records[pr.index] = TrialRecord(pr.index, {**r.params, "steps": pr.budget}, TrialState.RUNNING, rungs=r.rungs,
                                            attrs=r.attrs)
            trained[0] += pr.budget - pr.rung
            pool.start(pr.budget - pr.rung, pr.index)
            return True
        if nxt[0] >= search.total_trials:
            return False
        i = nxt[0]
        nxt[0] += 1
        proposal = search.propose(i, list(records.values()))
        records[i] = TrialRecord(i, proposal.params, TrialState.RUNNING, attrs=proposal.attrs)
        trained[0] += proposal.params["steps"]
        pool.start(proposal.params["steps"], i)
        return True

    def done(i: int) -> None:
        r = records[i]
        value = observe_at({k: r.params[k] for k in space}, r.params["steps"])
        d = search.on_run_end(list(records.values()), r, value)
        rungs = {**r.rungs, d.rung: value} if d.rung is not None else dict(r.rungs)
        if d.action == Action.PROMOTE and d.budget is not None:
            records[i] = TrialRecord(i, {**r.params, "steps": d.budget}, TrialState.RUNNING, rungs=rungs, attrs=r.attrs)
            trained[0] += d.budget - r.params["steps"]
            pool.start(d.budget - r.params["steps"], i)
            return
        state = {Action.PAUSE: TrialState.PAUSED, Action.PRUNE: TrialState.PRUNED}.get(d.action, TrialState.COMPLETED)
        records[i] = TrialRecord(i, r.params, state, (value,), rungs=rungs, attrs=r.attrs)

    pool.run(launch, done)
    return trained[0], records


def continuous(seeds: int, workers: int) -> dict[str, Any]:
    """asha with random configs against asha with sampler tpe (BOHB's rule) on multi-fidelity Hartmann 3."""
    space = {f"x{j}": {"type": "uniform", "low": 0.0, "high": 1.0} for j in range(3)}
    budget = {"param": "steps", "min": 3, "max": 27}
    out: dict[str, Any] = {}
    print(f"multi-fidelity Hartmann 3 (bench/search_objectives.py, noise sd {NOISE}), budgets 3/9/27, eta 3, "
          f"{workers} workers, {seeds} seeds; regret: the pick's noise-free value at 27 over the optimum")
    print(f"{'trials':>7}  {'sampler':<18}{'regret mean':>12}{'sd':>8}{'se':>8}{'steps':>8}")
    for trials in (81, 243):
        for sampler in ("random", "tpe"):
            regrets, steps = [], []
            for seed in range(seeds):
                def observe_at(p: dict[str, Any], t: int, seed: int = seed) -> float:
                    return hartmann3(p, t, seed) + random.Random(f"h3:{seed}:{sorted(p.items())}:{t}").gauss(0, NOISE)

                spent, records = asha_sweep(space, observe_at, {"type": "asha", "budget": budget, "eta": 3,
                                                                "trials": trials, "sampler": sampler, "seed": seed},
                                            workers)
                full = [r for r in records.values() if r.state == TrialState.COMPLETED]
                pick = min(full, key=lambda r: r.values[0])
                regrets.append(hartmann3({k: pick.params[k] for k in space}, 27, seed) - HARTMANN3_MIN)
                steps.append(spent)
            name = "tpe (BOHB's rule)" if sampler == "tpe" else sampler
            print(f"{trials:>7}  {name:<18}{fmean(regrets):>12.4f}{_sd(regrets):>8.4f}"
                  f"{_sd(regrets) / math.sqrt(seeds):>8.4f}{fmean(steps):>8.0f}")
            out[f"{trials}: {sampler}"] = {"regret": regrets, "steps": steps}
    return out


def _product(space: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    import itertools

    return list(itertools.product(*space.values()))


def grid27(seeds: int, workers: int) -> dict[str, Any]:
    """ASHA on the 27-grid: listed order vs shuffled, Ray's async rule vs the paper's, random vs tpe configs."""
    budget = {"param": "steps", "min": 3, "max": 27}
    variants: dict[str, dict[str, Any]] = {
        "listed, async (before)": {"order": "listed", "promotion": "async"},
        "shuffled, async": {"promotion": "async"},
        "shuffled, paper (default)": {},
        "tpe, paper": {"sampler": "tpe", "trials": 27},
    }
    out: dict[str, Any] = {}
    print(f"27-config grid, budgets 3/9/27, eta 3, {workers} workers, {seeds} seeds; the full grid is 729 steps; "
          "the default's bound 189 (25.9%)")
    print(f"{'objective':<14}{'variant':<28}{'steps mean':>11}{'sd':>7}{'max':>6}{'reached 27':>11}{'picked':>8}"
          f"{'regret':>9}{'sd':>8}")
    for oname, objective in (("curve model", curve_model), ("power law", power_law)):
        for vname, extra in variants.items():
            runs = [grid27_run(objective, {"type": "asha", "budget": budget, "eta": 3, "seed": s, **extra}, s, workers)
                    for s in range(seeds)]
            steps, regrets = [r.steps for r in runs], [r.regret for r in runs]
            reached, picked = sum(r.reached for r in runs), sum(r.picked for r in runs)
            print(f"{oname:<14}{vname:<28}{fmean(steps):>11.1f}{_sd(steps):>7.1f}{max(steps):>6.0f}"
                  f"{f'{reached}/{seeds}':>11}{f'{picked}/{seeds}':>8}{fmean(regrets):>9.4f}{_sd(regrets):>8.4f}")
            out[f"{oname}: {vname}"] = {"steps": steps, "reached": reached, "picked": picked, "regret": regrets}
    print("reached 27: seeds where the config best at 27 without noise trained to 27; picked: where it was also the "
          "one picked (the best observed at 27); regret: the picked config's noise-free value at 27 over the best's")
    return out


def _sd(xs: list[float]) -> float:
    return stdev(xs) if len(xs) > 1 else 0.0


def _grid_points(spec: Any) -> list[tuple[Any, ...]]:
    from spotsweep.shared.space import params_at, total_trials

    return [tuple(params_at(spec, i).values()) for i in range(total_trials(spec))]


if __name__ == "__main__":
    main()
