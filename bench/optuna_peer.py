"""The peer: Optuna with PostgreSQL storage (RDBStorage over SQLAlchemy and
psycopg 3), ``workers`` processes sharing one study, as Optuna documents for
distributed optimisation.

Workers are forked, connect and load the study, then wait at a barrier, so
process start and imports are not timed (spotsweep's services are started
and warmed up before its clock starts too). The sampler is RandomSampler:
the cheapest Optuna offers (TPE reads every trial on each ask), so the peer
is measured at its fastest.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

Objective = Callable[[Any], float]


def _quiet() -> None:
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def create_study(storage_url: str, name: str) -> None:
    import optuna

    _quiet()
    storage = optuna.storages.RDBStorage(storage_url)
    optuna.create_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    storage.engine.dispose()


def _worker(storage_url: str, name: str, n_trials: int, objective: Objective, barrier: Any, out: Any,
            heartbeat: int | None) -> None:
    import optuna

    _quiet()
    kw: dict[str, Any] = {}
    if heartbeat:
        # The retry callback's name since Optuna 4.9; RetryFailedTrialCallback before.
        retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
        kw = {"heartbeat_interval": heartbeat, "grace_period": 2 * heartbeat,
              "heartbeat_stale_trial_callback": retry(max_retry=3)}
    storage = optuna.storages.RDBStorage(storage_url, **kw)
    study = optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())
    barrier.wait()
    started = time.time()
    study.optimize(objective, n_trials=n_trials)
    out.put({"started": started, "ended": time.time(), "extra": getattr(objective, "collected", None)})


def start(storage_url: str, name: str, shares: list[int], objective: Objective,
          heartbeat: int | None = None) -> tuple[list[Any], Any]:
    """Create the study, fork one worker per share (its trial count), and release them at once;
    returns the processes and the queue each puts its result on."""
    create_study(storage_url, name)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(len(shares) + 1), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(storage_url, name, k, objective, barrier, out, heartbeat), daemon=True)
             for k in shares]
    for p in procs:
        p.start()
    barrier.wait()
    return procs, out


def run(storage_url: str, name: str, n_trials: int, workers: int, objective: Objective,
        heartbeat: int | None = None) -> dict[str, Any]:
    """Run ``n_trials`` over ``workers`` processes; wall time from the barrier to the last worker's end."""
    shares = [n_trials // workers + (1 if i < n_trials % workers else 0) for i in range(workers)]
    procs, out = start(storage_url, name, shares, objective, heartbeat)
    t0 = time.time()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(30)
    t1 = max(r["ended"] for r in results)
    return {"seconds": t1 - t0, "started": t0, "workers": results}


def count_trials(storage_url: str, name: str) -> dict[str, int]:
    import optuna

    _quiet()
    storage = optuna.storages.RDBStorage(storage_url)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    storage.engine.dispose()
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts
