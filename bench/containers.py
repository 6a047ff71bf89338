"""What a container costs a trial (issue 30): the agent's runner over moto's S3 (the production path), one short
trial at a time, as a process, in a Docker container and in a Podman container, against the peer at its best:
``docker run --rm`` (and ``podman run --rm``) of the same command, timed alone in the same run.

Each trial writes one metric and one checkpoint and exits; its time is from ``run_trial``'s call to its return
(pull check, start, supervision, the checkpoint's and the logs' uploads, the container's removal). A training
trial runs for minutes: the figure to read is the overhead in seconds, not the ratio.

Usage: python bench/containers.py [--trials 10] [--json PATH]   (as root, with dockerd and podman running;
deploy/container-runtime.sh installs both; the image is tests/support/trial_image.py's)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import moto_s3, summary, table, write_json  # noqa: E402
from spotsweep.services.agent.container import Runtime  # noqa: E402
from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial  # noqa: E402
from spotsweep.shared.artifacts import S3ArtifactStore  # noqa: E402
from spotsweep.shared.messages import TrialMessage  # noqa: E402
from spotsweep.shared.settings import Settings  # noqa: E402
from tests.support.trial_image import trial_image  # noqa: E402

SCRIPT = ("import json, os; d = os.environ['SPOTSWEEP_CHECKPOINT_DIR']; open(d + '/w', 'w').write('x'); "
          "f = open(os.environ['SPOTSWEEP_METRICS'], 'a'); f.write(json.dumps({'step': 1, 'loss': 0.5}) + '\\n'); "
          "f.write(json.dumps({'checkpoint': 1}) + '\\n')")


def through_spotsweep(store: S3ArtifactStore, work: Path, runtime: Runtime | None, n: int) -> list[float]:
    config = RunnerConfig(agent_id="bench", workdir=work, runtime=runtime)
    label = work.name  # trial ids of their own: no run restores another's checkpoint
    times = []
    for i in range(n):
        msg = TrialMessage(sweep_id="bench", trial_id=f"bench.{label}{i}", attempt=1, trial_name=f"t{i}", index=i, params={},
                           argv=["python3", "-c", SCRIPT], metric="loss")
        started = time.perf_counter()
        end = run_trial(msg, store, lambda _event: None, config, RunControls())
        times.append(time.perf_counter() - started)
        assert end is not None and end.outcome == "completed", end
    return times


def bare(binary: str, image: str, n: int) -> list[float]:
    """The peer at its best: the runtime's own ``run --rm`` of the command, nothing else."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([binary, "run", "--rm", image, "python3", "-c", "pass"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {}
    with moto_s3() as env, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v for k, v in env.items()})
        store = S3ArtifactStore.from_settings(settings)
        runs["process (spotsweep)"] = through_spotsweep(store, Path(tmp) / "p", None, args.trials)
        for kind in ("docker", "podman"):
            binary = shutil.which(kind)
            if binary is None:
                continue
            image = trial_image(kind)
            runtime = Runtime(binary, image, tmp)
            runs[f"{kind} (spotsweep)"] = through_spotsweep(store, Path(tmp) / kind, runtime, args.trials)
            runs[f"{kind} run --rm (peer)"] = bare(binary, image, args.trials)
    base = summary(runs["process (spotsweep)"])["median"]
    rows: list[list[Any]] = []
    for name, values in runs.items():
        s = summary(values)
        rows.append([name, s["median"], s["min"], s["max"], s["median"] - base])
    print(table(f"One short trial, {args.trials} runs each (seconds)", ["how", "median", "min", "max", "over process"],
                rows))
    write_json("containers", {"trials": args.trials, "runs": {k: summary(v) for k, v in runs.items()}}, args.json)


if __name__ == "__main__":
    main()
