"""spotsweep's search against Optuna and Ray Tune at equal step budgets (issue 21, "Show it").

Every method searches the same 81-config grid (bench/search_objectives.py:
lr, batch, depth, wd at 3 levels; a trial trains up to 27 steps; budgets
3/9/27, eta 3) on the same held-out objectives, with 4 trials at once,
under the same hard cap of training steps (``--cap``, default 729: a third
of the full grid's 2,187). No step past the cap is trained: spotsweep's and
Optuna's runs start a job only when it fits under the cap, Ray's runs are
stopped when the cap's step is reported.

- spotsweep: its own decision objects (``Search.propose``, ``Search.on_run_end``,
  ``Search.promotions``, as the planner calls them) in a simulated pool
  where a job is a run of so many steps; a promotion resumes from the
  checkpoint and trains only the steps it adds.
- Optuna: ``TPESampler`` with ``HyperbandPruner`` and with
  ``SuccessiveHalvingPruner`` (min resource 3, reduction factor 3), asked and
  told in the same pool, every step reported, stopped on ``should_prune()``.
- Ray Tune: real ``tune.Tuner`` runs in a separate virtualenv (bench/search_ray.py).

A run's pick is its best observed final value among trials that trained all
27 steps; its regret is the pick's true (noise-free) final value minus the
grid's optimum; "best picked" counts the seeds where the pick is the optimum.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import optuna

from search_objectives import ETA, GRID81, MAX_T, MIN_T, OBJECTIVES, grid, key, observe, optimum, regret
from spotsweep.services.planner.search import Action, Search, TrialRecord
from spotsweep.shared.spec import parse_spec
from spotsweep.shared.states import TrialState

BUDGET = {"param": "steps", "min": MIN_T, "max": MAX_T}


@dataclass
class StepPool:
    """``workers`` slots running jobs of so many steps in time order; no job starts past ``cap`` steps."""

    workers: int
    cap: float
    committed: float = 0.0  # steps of every job started (what the run trains in the end)
    trained: float = 0.0  # steps trained so far
    now: float = 0.0
    events: list[tuple[float, int, Any]] = field(default_factory=list)
    found: list[tuple[float, str, float]] = field(default_factory=list)  # (trained then, config, final value)
    ended: list[tuple[str, float, int]] = field(default_factory=list)  # every completed trial: (label, value, reached)
    _seq: int = 0

    def fits(self, steps: float) -> bool:
        return self.committed + steps <= self.cap

    def start(self, steps: float, payload: Any) -> None:
        self._seq += 1
        self.committed += steps
        heapq.heappush(self.events, (self.now + steps, self._seq, payload))

    def run(self, launch: Callable[[], bool], done: Callable[[Any], None]) -> None:
        while True:
            while len(self.events) < self.workers and launch():
                pass
            if not self.events:
                return
            at, _, payload = heapq.heappop(self.events)
            self.trained += (at - self.now) * (len(self.events) + 1)
            self.now = at
            done(payload)


def _spec(strategy: dict[str, Any], early_stop: dict[str, Any] | None, workers: int) -> Any:
    halving = "budget" in strategy or early_stop is not None
    command = ["python", "train.py"] + (["{steps}"] if halving else [])
    data = {"name": "peers", "command": command, "metric": {"name": "loss"}, "space": GRID81,
            "strategy": strategy, "max_concurrent": workers}
    return parse_spec({**data, "early_stop": early_stop} if early_stop else data)


def run_ours(strategy: dict[str, Any], objective: str, seed: int, workers: int, cap: float,
             early_stop: dict[str, Any] | None = None) -> StepPool:
    """One sweep of the 81-grid through spotsweep's decision objects under the step cap."""

    def value(index: int, params: dict[str, Any], reached: int) -> tuple[str, float]:
        config = {k: params[k] for k in GRID81}
        return key(config), observe(objective, config, reached, seed)

    pool = StepPool(workers, cap)
    drive(Search(_spec(strategy, early_stop, workers)), pool, value, MAX_T)
    return pool


def drive(search: Search, pool: StepPool, value: Callable[[int, dict[str, Any], int], tuple[str, float]],
          max_t: int) -> dict[int, TrialRecord]:
    """Run a sweep's decisions in ``pool``: new trials from ``propose``, waiting ones from
    ``promotions``, each run's end through ``on_run_end``. ``value(index, params, reached)``
    gives a run's (label, observed value); a trial that completes at ``max_t`` is recorded
    in ``pool.found``."""
    records: dict[int, TrialRecord] = {}
    attrs: dict[str, Any] = {}
    state = {"next": 0, "closed": False}
    budget_param = search.budget_param or "steps"

    def launch() -> bool:
        if state["closed"]:
            return False
        final = state["next"] >= search.total_trials and not pool.events
        for p in search.promotions(list(records.values()), 1, final):
            if not pool.fits(p.budget - p.rung):
                state["closed"] = True  # as the planner: a promotion past the budget ends the sweep's launches
                return False
            r = records[p.index]
            records[p.index] = TrialRecord(p.index, {**r.params, budget_param: p.budget}, TrialState.RUNNING,
                                           rungs=r.rungs, attrs=r.attrs)
            pool.start(p.budget - p.rung, p.index)
            return True
        i = state["next"]
        if i >= search.total_trials:
            return False
        proposal = search.propose(i, list(records.values()), attrs)
        steps = proposal.params.get(budget_param, max_t)
        if not pool.fits(steps):
            state["closed"] = True
            return False
        attrs.update(proposal.study_attrs or {})
        records[i] = TrialRecord(i, proposal.params, TrialState.RUNNING, attrs=proposal.attrs)
        state["next"] += 1
        pool.start(steps, i)
        return True

    def done(i: int) -> None:
        r = records[i]
        reached = r.params.get(budget_param, max_t)
        label, observed = value(i, dict(r.params), reached)
        d = search.on_run_end(list(records.values()), r, observed)
        rungs = {**r.rungs, d.rung: observed} if d.rung is not None else dict(r.rungs)
        if d.action == Action.PROMOTE and d.budget is not None and pool.fits(d.budget - reached):
            records[i] = TrialRecord(i, {**r.params, budget_param: d.budget}, TrialState.RUNNING, rungs=rungs,
                                     attrs=r.attrs)
            pool.start(d.budget - reached, i)
            return
        # A promotion past the cap completes the trial where it is, as the planner does past a budget cap.
        states = {Action.PAUSE: TrialState.PAUSED, Action.PRUNE: TrialState.PRUNED}
        records[i] = TrialRecord(i, r.params, states.get(d.action, TrialState.COMPLETED), (observed,), rungs=rungs,
                                 attrs=r.attrs)
        if records[i].state == TrialState.COMPLETED:
            pool.ended.append((label, observed, reached))
            if reached >= max_t:
                pool.found.append((pool.trained, label, observed))

    pool.run(launch, done)
    return records


def run_optuna(pruner: optuna.pruners.BasePruner, objective: str, seed: int, workers: int, cap: float) -> StepPool:
    """Optuna's TPE with ``pruner``, asked and told in the same pool, one job per step."""
    # A fixed name: HyperbandPruner assigns brackets by a hash of the study name and the trial number.
    study = optuna.create_study(study_name=f"bench-{objective}-{seed}", sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=pruner)
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        k: optuna.distributions.CategoricalDistribution(v) for k, v in GRID81.items()}
    pool = StepPool(workers, cap)

    def launch() -> bool:
        if not pool.fits(1):
            return False
        pool.start(1, (study.ask(dists), 1))
        return True

    def done(payload: tuple[optuna.Trial, int]) -> None:
        trial, t = payload
        value = observe(objective, trial.params, t, seed)
        trial.report(value, t)
        if t >= MAX_T:
            study.tell(trial, value)
            pool.found.append((pool.trained, key(trial.params), value))
        elif trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif pool.fits(1):
            pool.start(1, (trial, t + 1))
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # the cap: not trained further

    pool.run(launch, done)
    return pool


def our_methods() -> dict[str, Callable[[str, int, int, float], StepPool]]:
    asha = {"type": "asha", "budget": BUDGET, "eta": ETA}
    hyperband = {"type": "hyperband", "budget": BUDGET, "eta": ETA}
    return {
        "spotsweep asha (shuffled, paper)": lambda o, s, w, c: run_ours({**asha, "seed": s}, o, s, w, c),
        "spotsweep asha (shuffled, async)": lambda o, s, w, c: run_ours({**asha, "seed": s, "promotion": "async"},
                                                                         o, s, w, c),
        "spotsweep asha (listed, async)": lambda o, s, w, c: run_ours({**asha, "seed": s, "order": "listed",
                                                                        "promotion": "async"}, o, s, w, c),
        "spotsweep random": lambda o, s, w, c: run_ours({"type": "random", "trials": 81, "seed": s}, o, s, w, c),
        "spotsweep tpe + hyperband": lambda o, s, w, c: run_ours({"type": "tpe", "trials": 81, "seed": s}, o, s, w, c,
                                                                  early_stop=hyperband),
        "optuna tpe + hyperband": lambda o, s, w, c: run_optuna(
            optuna.pruners.HyperbandPruner(min_resource=MIN_T, max_resource=MAX_T, reduction_factor=ETA), o, s, w, c),
        "optuna tpe + successive halving": lambda o, s, w, c: run_optuna(
            optuna.pruners.SuccessiveHalvingPruner(min_resource=MIN_T, reduction_factor=ETA), o, s, w, c),
    }


def run_summary(method: str, objective: str, seed: int, steps: float, found: list[Any], cap: float) -> dict[str, Any]:
    """One run as the tables need it: steps, the pick (at the cap and at half of it) and its regret."""
    best_key = optimum(objective, seed)[0]

    configs = {key(c): c for c in grid()}

    def pick(limit: float) -> str | None:
        done = [(value, k) for at, k, value in found if at <= limit]
        return min(done)[1] if done else None

    final, half = pick(math.inf), pick(cap / 2)
    final_regret = regret(objective, seed, configs[final]) if final else None
    half_regret = regret(objective, seed, configs[half]) if half else None
    return {"method": method, "objective": objective, "seed": seed, "steps": steps, "completed": len(found),
            "regret": final_regret, "regret_half": half_regret, "best_picked": final == best_key,
            "picked": final}


def run_ray(python: Path, objectives: list[str], seeds: list[int], workers: int, cap: float,
            schedulers: tuple[str, ...] = ("asha", "async_hyperband")) -> list[dict[str, Any]]:
    """Ray Tune's runs, in its own virtualenv as a subprocess; one summary per run."""
    job = {"objectives": objectives, "seeds": seeds, "schedulers": list(schedulers), "cap": int(cap), "workers": workers}
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run([str(python), str(Path(__file__).with_name("search_ray.py"))], input=json.dumps(job),
                          capture_output=True, text=True, env=env)
    runs = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 and not runs:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"the Ray Tune peer exited {proc.returncode}: {' | '.join(tail)}")
    return [{**run_summary(r["method"], r["objective"], r["seed"], r["steps"], r["found"], cap), "wall_s": r["wall_s"]}
            for r in runs]


def table(runs: list[dict[str, Any]], seeds: int) -> list[dict[str, Any]]:
    """Per (objective, method): mean regret and its spread, regret at half the cap, steps, best picked."""
    rows = []
    for objective in dict.fromkeys(r["objective"] for r in runs):
        for method in dict.fromkeys(r["method"] for r in runs):
            mine = [r for r in runs if r["objective"] == objective and r["method"] == method]
            if not mine:
                continue
            regrets = [r["regret"] for r in mine if r["regret"] is not None]
            halves = [r["regret_half"] for r in mine if r["regret_half"] is not None]
            q = statistics.quantiles(regrets, n=4, method="inclusive") if len(regrets) > 1 else [regrets[0]] * 3 if regrets else [math.nan] * 3
            rows.append({"objective": objective, "method": method, "runs": len(mine),
                         "regret_mean": statistics.fmean(regrets) if regrets else math.nan,
                         "regret_sd": statistics.stdev(regrets) if len(regrets) > 1 else 0.0,
                         "regret_iqr": [q[0], q[2]], "regret_half_mean": statistics.fmean(halves) if halves else math.nan,
                         "no_pick": len(mine) - len(regrets), "no_pick_half": len(mine) - len(halves),
                         "steps_mean": statistics.fmean(r["steps"] for r in mine),
                         "steps_range": [min(r["steps"] for r in mine), max(r["steps"] for r in mine)],
                         "completed_mean": statistics.fmean(r["completed"] for r in mine),
                         "best_picked": sum(r["best_picked"] for r in mine)})
    return rows


def print_table(rows: list[dict[str, Any]], cap: float) -> None:
    print(f"{'objective':<11}{'method':<34}{'regret':>8}{'sd':>7}{'IQR':>14}{f'@{cap / 2:.0f}':>8}"
          f"{'steps':>7}{'range':>10}{'done':>6}{'best':>7}")
    for r in rows:
        iqr = f"{r['regret_iqr'][0]:.3f}-{r['regret_iqr'][1]:.3f}"
        half = f"{r['regret_half_mean']:.3f}" + ("*" if r["no_pick_half"] else "")
        span = f"{r['steps_range'][0]:.0f}-{r['steps_range'][1]:.0f}"
        print(f"{r['objective']:<11}{r['method']:<34}{r['regret_mean']:>8.4f}{r['regret_sd']:>7.3f}{iqr:>14}{half:>8}"
              f"{r['steps_mean']:>7.0f}{span:>10}{r['completed_mean']:>6.1f}{str(r['best_picked']) + '/' + str(r['runs']):>7}")
    print("regret: the pick's true final value minus the optimum, mean over seeds (sd, IQR); @N: the mean regret of the "
          "pick when N steps were trained (*: some seeds had no trial at 27 steps yet, left out); steps: trained in "
          "all; done: trials that trained all 27 steps; best: seeds whose pick is the optimum")


def peers(seeds: int, workers: int, cap: float, with_ray: bool, methods: list[str] | None = None) -> dict[str, Any]:
    """Every method (or those named in ``methods``) on every objective and seed; prints the
    table, returns everything for the JSON."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objectives = list(OBJECTIVES)
    runs: list[dict[str, Any]] = []
    chosen = our_methods()
    unknown = sorted(set(methods or ()) - set(chosen))
    if unknown:
        raise SystemExit(f"--methods: no method {', '.join(map(repr, unknown))}; there are {', '.join(map(repr, chosen))}")
    for name, fn in chosen.items():
        if methods and name not in methods:
            continue
        for objective in objectives:
            for seed in range(seeds):
                started = time.perf_counter()
                pool = fn(objective, seed, workers, cap)
                runs.append({**run_summary(name, objective, seed, pool.committed, pool.found, cap),
                             "wall_s": time.perf_counter() - started})
    ray_note = "Ray Tune skipped (--no-ray)"
    if with_ray:
        python, ray_note = harness.ray_python()
        if python is not None:
            runs += run_ray(python, objectives, list(range(seeds)), workers, cap)
    print(f"81-config grid, budgets {MIN_T}/{MIN_T * ETA}/{MAX_T}, eta {ETA}, {workers} trials at once, cap {cap:.0f} "
          f"steps (the full grid: {81 * MAX_T}), {seeds} seeds; {ray_note}")
    rows = table(runs, seeds)
    print_table(rows, cap)
    return {"grid": GRID81, "cap": cap, "workers": workers, "seeds": seeds, "ray": ray_note, "table": rows, "runs": runs}
