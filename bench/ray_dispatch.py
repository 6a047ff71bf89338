"""The Ray Tune peer of bench/headline.py's dispatch figure, run inside the Ray peer
virtualenv (``ray[tune]``): ``n`` no-op function trials on a local Ray of ``workers``
CPUs, one CPU each, timed from ``Tuner.fit()`` to its return (``ray.init`` is not timed,
as spotsweep's and Optuna's start-up is not).

``mode`` ``default``: Tune as a user first writes it. ``tuned``: what Ray's docs advise
for many short trials (the "How can I make Tune faster" FAQ and the scalability
benchmarks): no automatic logger callbacks (``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS``), actors
reused between trials, no console table, results not buffered per trial.

Reads ``{"n": ..., "workers": ..., "mode": ...}`` on stdin, prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time


def main() -> None:
    job = json.load(sys.stdin)
    n, workers, mode = int(job["n"]), int(job["workers"]), job["mode"]
    if mode == "tuned":
        os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
        os.environ["TUNE_RESULT_BUFFER_LENGTH"] = "1"
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    from ray import tune

    def noop(config: dict[str, int]) -> dict[str, float]:
        return {"loss": float(config["i"])}

    ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as storage:
        tuner = tune.Tuner(
            noop,
            param_space={"i": tune.grid_search(list(range(n)))},
            tune_config=tune.TuneConfig(reuse_actors=(mode == "tuned"), max_concurrent_trials=workers),
            run_config=tune.RunConfig(storage_path=storage, name=f"dispatch-{mode}", verbose=0 if mode == "tuned" else None),
        )
        t0 = time.time()
        grid = tuner.fit()
        seconds = time.time() - t0
        completed = sum(1 for r in grid if r.error is None)
    ray.shutdown()
    print(json.dumps({"seconds": seconds, "completed": completed, "n": n, "workers": workers, "mode": mode,
                      "ray": ray.__version__}))


if __name__ == "__main__":
    main()
