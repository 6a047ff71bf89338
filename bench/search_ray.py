"""The Ray Tune peer of bench/search_peers.py, run in its own virtualenv (``ray[tune]``).

Reads a job as JSON on stdin (``objectives``, ``seeds``, ``schedulers``,
``cap`` in steps, ``workers``, ``step_seconds``) and prints one ``RESULT {json}`` line per
(scheduler, objective, seed). Each run is a real ``tune.Tuner`` over a
function trainable that reports the objective's value once per step
(``tune.report``) up to 27 steps, sleeping ``step_seconds`` (0.03) before
each so that a step, not Ray's start of a trial actor, is what takes time, with configs drawn by Tune's
``BasicVariantGenerator`` (``tune.choice`` per param, seeded), at most
``workers`` trials at once, under Ray's ASHA (``ASHAScheduler``, one
bracket) or its asynchronous HyperBand (``AsyncHyperBandScheduler``, three
brackets), grace period 3, reduction factor 3. A ``Stopper`` counts every
reported step and ends the experiment when ``cap`` steps were trained;
the steps a run trained are its trials' last ``training_iteration``s
summed, so a step trained is counted even when the trial was stopped
after it. One ``ray.init`` serves every run.

    build/peers/ray/bin/python bench/search_ray.py < job.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard files per trial
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler  # noqa: E402
from ray.tune.search import BasicVariantGenerator  # noqa: E402

from search_objectives import ETA, GRID81, MAX_T, MIN_T, key, observe  # noqa: E402


def trainable(config: dict[str, Any]) -> None:
    params = {k: config[k] for k in GRID81}
    for t in range(1, MAX_T + 1):
        time.sleep(config["step_seconds"])  # a step takes time, so trials overlap as they would in training
        tune.report({"loss": observe(config["objective"], params, t, config["seed"])})


class StepCap(tune.Stopper):
    """Counts the steps reported and stops everything at ``cap``; records each trial that reached MAX_T."""

    def __init__(self, cap: int) -> None:
        self.cap, self.steps = cap, 0
        self.found: list[tuple[int, str, float]] = []  # (steps trained then, config, final value)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.steps += 1
        if result["training_iteration"] >= MAX_T:
            self.found.append((self.steps, key(result["config"]), result["loss"]))
        return False

    def stop_all(self) -> bool:
        return self.steps >= self.cap


def scheduler(kind: str) -> Any:
    common = {"time_attr": "training_iteration", "max_t": MAX_T, "grace_period": MIN_T, "reduction_factor": ETA}
    if kind == "asha":
        return ASHAScheduler(brackets=1, **common)
    return AsyncHyperBandScheduler(brackets=3, **common)


def one(kind: str, objective: str, seed: int, cap: int, workers: int, step_seconds: float, storage: str) -> dict[str, Any]:
    stopper = StepCap(cap)
    space: dict[str, Any] = {k: tune.choice(v) for k, v in GRID81.items()}
    space.update(objective=objective, seed=seed, step_seconds=step_seconds)
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=100_000, max_concurrent_trials=workers,
                                    scheduler=scheduler(kind), reuse_actors=True,
                                    search_alg=BasicVariantGenerator(random_state=seed)),
        run_config=tune.RunConfig(name=f"{kind}-{objective}-{seed}", storage_path=storage, stop=stopper, verbose=0),
    )
    started = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - started
    trained = sum(int(r.metrics.get("training_iteration", 0)) for r in grid if r.metrics)
    return {"method": f"ray {kind}", "objective": objective, "seed": seed, "steps": trained, "trials": len(grid),
            "found": stopper.found, "wall_s": wall}


def main() -> None:
    job = json.load(sys.stdin)
    ray.init(num_cpus=job["workers"], include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    with tempfile.TemporaryDirectory(prefix="spotsweep-bench-ray-") as storage:
        for kind in job["schedulers"]:
            for objective in job["objectives"]:
                for seed in job["seeds"]:
                    out = one(kind, objective, seed, job["cap"], job["workers"], job.get("step_seconds", 0.03), storage)
                    print("RESULT " + json.dumps(out), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
