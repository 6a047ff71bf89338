"""The seed's experiment as a user writes it (issue 40), through the real services and a real Docker daemon.

A DeepSeek fine-tuning sweep (lr x dropout x optimizer over a fixed tiny architecture) in the project's own
worker image (``make images``: its ENTRYPOINT, non-root USER and HEALTHCHECK as shipped), its command
``spotsweep train tinylm ... --init-from weights``, a corpus and pretrained weights staged from the S3 server
under ``inputs:``, a memory request, a smoke stage, median early stopping and a priority; on a docker agent
that names no ``--default-image`` and runs trials as a trial user. Mid-run a second docker agent starts on
the same node and the same ``--workdir`` (running root trials, in the image's non-root USER): it removes no
live trial. The first agent is then preempted (SIGTERM) and its trials resume on the second. Every trial
ends completed or pruned, none ``oom``, each starting from the weights: its first evaluation is below a
from-scratch run's at the same step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from spotsweep.services.agent.container import LABEL
from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.trainer import corpus
from tests.integration.test_inputs_s3 import USER, _ensure_user
from tests.support.cluster import Cluster, wait_for
from tests.support.trial_image import need
from tests.support.worker_image import worker_image
from waiting import wait_until  # tests/support

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="runs trials as another user")]
ARCH = ["--dim", "32", "--layers", "1", "--heads", "2", "--experts", "2", "--top-k", "1", "--seq-len", "32",
        "--threads", "1"]
STEPS, EVAL = 800, 100


def trainer(*args: str, ckpt: Path, metrics: Path, cwd: Path) -> list[dict[str, Any]]:
    """``spotsweep train tinylm`` on the host (the pretraining a user did earlier, and a from-scratch baseline)."""
    env = {**os.environ, "SPOTSWEEP_CHECKPOINT_DIR": str(ckpt), "SPOTSWEEP_METRICS": str(metrics)}
    done = subprocess.run([sys.executable, "-m", "spotsweep", "train", "tinylm", *ARCH, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def first_eval(points: list[dict[str, Any]]) -> tuple[int, float]:
    return next((p["step"], p["val_loss"]) for p in points if "val_loss" in p)


@pytest.fixture()
def node_dir() -> Iterator[Path]:
    """The agents' shared --workdir, where the trial user can reach it (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="spotsweep-seed-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def running_containers() -> set[str]:
    """The trial containers running now (the label every agent's trial containers carry)."""
    ps = subprocess.run([need("docker"), "ps", "--quiet", "--no-trunc", "--filter", f"label={LABEL}"],
                        capture_output=True, text=True, check=True).stdout.split()
    return set(ps)


def rows(db: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


@pytest.mark.timeout(900)  # minutes: nine trials in containers on two cores, a preemption among them
def test_the_seeds_finetuning_sweep_runs_in_the_worker_image_across_a_second_agent_and_a_preemption(
        cluster: Cluster, s3_env: dict[str, str], node_dir: Path, tmp_path: Path) -> None:
    image = worker_image()
    _ensure_user()
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    # What the user has before the sweep: a corpus, and weights pretrained on it, uploaded to the S3 server.
    (tmp_path / "corpus.txt").write_bytes(corpus.build(300_000, seed=7))
    trainer("--data", "corpus.txt", "--steps", "300", "--eval-every", "300", "--ckpt-every", "300",
            ckpt=tmp_path / "base", metrics=tmp_path / "base.jsonl", cwd=tmp_path)
    scratch = trainer("--data", "corpus.txt", "--steps", str(EVAL), "--eval-every", str(EVAL), "--lr", "3e-3",
                      ckpt=tmp_path / "scratch", metrics=tmp_path / "scratch.jsonl", cwd=tmp_path)
    bucket = "datasets-" + s3_env["SPOTSWEEP_S3_BUCKET"][-8:]
    store = S3ArtifactStore(s3_env["SPOTSWEEP_S3_ENDPOINT"], s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
                            s3_env["SPOTSWEEP_S3_SECRET_KEY"], bucket)
    store.put_bytes("corpus/v1/corpus.txt", (tmp_path / "corpus.txt").read_bytes())
    for f in (tmp_path / "base").iterdir():
        store.put_bytes(f"weights/tinylm/v1/{f.name}", f.read_bytes())

    spec = {
        "name": "seed-finetune", "priority": 5, "image": image,
        "command": ["spotsweep", "train", "tinylm", "--lr", "{lr}", "--batch-size", "{batch_size}",
                    "--dropout", "{dropout}", "--optimizer", "{optimizer}", *ARCH, "--steps", "{steps}",
                    "--lr-horizon", str(STEPS), "--eval-every", str(EVAL), "--ckpt-every", str(EVAL),
                    "--log-every", str(EVAL), "--data", "data/corpus.txt", "--init-from", "weights"],
        "metric": {"name": "val_loss", "mode": "min"},
        "space": {"lr": [1e-3, 3e-3], "batch_size": [8], "dropout": [0.0, 0.1], "optimizer": ["adamw", "sgd"],
                  "steps": [STEPS]},
        "strategy": {"type": "grid"}, "max_concurrent": 4, "trial_name": "ft_{index:02d}",
        "inputs": [{"from": f"s3://{bucket}/corpus/v1/", "to": "data"},
                   {"from": f"s3://{bucket}/weights/tinylm/v1/", "to": "weights"}],
        "resources": {"gpus": 0, "class": "cpu", "cpus": 1, "memory": "1Gi"},
        "smoke": {"trials": 1, "budget": 200, "param": "steps"},
        "early_stop": {"type": "median", "startup_trials": 2, "warmup_steps": 300, "min_trials": 1},
        "retries": {"max_failures": 1},
    }
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cluster.cli("validate", str(path)).returncode == 0

    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    agent = ["agent", "--class", "cpu", "--runtime", "docker", "--workdir", str(node_dir), "--slots", "2"]
    cluster.start("first", *agent, "--trial-user", USER)  # no --default-image: the spec names its image
    submitted = cluster.cli("submit", str(path))
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = submitted.stdout.strip().splitlines()[-1]

    # Mid-run: two of the first agent's trials past a checkpoint, then a second agent on the same --workdir.
    checkpointed = ("SELECT count(DISTINCT trial_id) FROM metric_points WHERE sweep_id = %s AND name = 'val_loss' "
                    "AND step >= %s")
    assert (wait_for(db, checkpointed, (sweep_id, 2 * EVAL), lambda n: n >= 2, timeout=240) or 0) >= 2, cluster.logs()
    assert running_containers(), cluster.logs()
    cluster.start("second", *agent, "--allow-root-trials")  # root trials, in an image whose USER is 10001
    assert wait_until(lambda: "agent ready" in (cluster.tmp / "second.log").read_text(), 90), cluster.logs()
    time.sleep(3)
    # The second agent's start removed nothing of the first's: no run failed (the bug: recorded failed, oom).
    assert not rows(db, "SELECT failure FROM run_events WHERE sweep_id = %s AND failure IS NOT NULL", sweep_id)

    cluster.term("first")  # the spot notice: its trials checkpoint, stop and go back to the queue
    assert cluster.procs["first"].wait(120) == 0, cluster.logs()
    done = "SELECT count(*) FILTER (WHERE state IN ('completed', 'pruned', 'failed', 'cancelled')) FROM trial_results " \
           "WHERE sweep_id = %s"
    assert wait_for(db, done, (sweep_id,), lambda n: n >= 9, timeout=600) == 9, cluster.logs()

    results = rows(db, "SELECT trial_name, state, error, preemptions, smoke, trial_id FROM trial_results "
                       "WHERE sweep_id = %s ORDER BY trial_name", sweep_id)
    assert all(state in ("completed", "pruned") for _, state, *_ in results), (results, cluster.logs())
    assert sum(r[3] for r in results) >= 1, results  # the preemption resumed somewhere
    failures = rows(db, "SELECT failure FROM run_events WHERE sweep_id = %s AND failure IS NOT NULL", sweep_id)
    assert not failures, failures
    by_agent = dict(rows(db, "SELECT agent, count(*) FROM run_events WHERE sweep_id = %s AND kind = 'trial.finished' "
                             "AND outcome = 'completed' GROUP BY agent", sweep_id))
    assert len(by_agent) == 2, by_agent  # both agents completed trials: the trial user's and the root ones
    # Every trial started from the weights: its first evaluation is below a from-scratch run's at that step.
    scratch_step, scratch_loss = first_eval(scratch)
    firsts = dict(rows(db, "SELECT DISTINCT ON (trial_id) trial_id, value FROM metric_points WHERE sweep_id = %s "
                           "AND name = 'val_loss' AND step = %s ORDER BY trial_id, attempt", sweep_id, scratch_step))
    assert len(firsts) == 9 and max(firsts.values()) < scratch_loss - 0.2, (firsts, scratch_loss)
    cluster.stop()
    assert not running_containers(), "a trial container outlived its agents"

