"""The README's results examples run as printed, against a real sweep in PostgreSQL.

The sweep is cheap (no torch) but has what the examples meet for real: the
`deepseek-small` name and its `learning_rate` param, and a trial that failed
once and reported the same steps again on its second attempt (the case that
broke the README's earlier `pivot`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from cluster import Cluster  # noqa: E402  # tests/support (tests/conftest.py)
from waiting import wait_until  # noqa: E402  # tests/support

from tests.integration.test_workdir import _consumers

README = Path(__file__).resolve().parents[1] / "README.md"
TRIAL = (
    "import os, sys; from spotsweep import trial\n"
    "lr = float(trial.params['learning_rate'])\n"
    "for step in (1, 2, 3):\n"
    "    trial.report(step, val_loss=lr * 100 + 1 / step)\n"
    "    if step == 2 and lr == 0.01 and trial.attempt == 1:\n"
    "        sys.exit('fails once after step 2')\n"
)


def _section_blocks(title: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block under the README heading ``title``."""
    text = README.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w*)\n(.*?)^```", section, flags=re.S | re.M)


def _sweep(database_url: str, tmp: Path) -> dict[str, str]:
    """Run the sweep in local mode over ``database_url``; the environment the examples then run in."""
    (tmp / "trial.py").write_text(TRIAL)
    spec = tmp / "deepseek-small.yaml"
    spec.write_text("name: deepseek-small\ncommand: [python, trial.py]\nmetric: {name: val_loss, mode: min}\n"
                    "space: {learning_rate: [0.001, 0.003, 0.01], optimizer: [adamw, sgd]}\n"
                    "retries: {max_failures: 1}\nresources: {gpus: 0, class: cpu}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env.update(SPOTSWEEP_DATABASE_URL=database_url, SPOTSWEEP_HOME=str(tmp / "home"))
    proc = subprocess.run([sys.executable, "-m", "spotsweep", "run", str(spec)], env=env, cwd=tmp, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env


def test_the_readme_results_examples_run_as_printed(database_url: str, tmp_path: Path) -> None:
    sweep_env = _sweep(database_url, tmp_path)
    (shell,) = [code for lang, code in _section_blocks("Results are SQL") if code.startswith("psql ")]
    proc = subprocess.run(["bash", "-c", shell], env=sweep_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "deepseek-small" in line]
    assert len(lines) == 6 and "| 0.001 " in lines[0]  # best first: the smallest learning rate
    blocks = [code for lang, code in _section_blocks("Results are SQL") if lang == "python"]
    assert len(blocks) == 2
    for code in blocks:
        proc = subprocess.run([sys.executable, "-c", code], env=sweep_env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
    pandas_out = subprocess.run([sys.executable, "-c", blocks[0]], env=sweep_env, capture_output=True, text=True,
                                timeout=120).stdout
    assert "deepseek-small" in pandas_out and "step" in pandas_out


# -- the first hour, step 2: the distributed block runs as printed --------------
# Only the values of the exported settings change (the test's own vhost, database
# and moto bucket stand in for the compose services); the block must set exactly
# those settings, so one the README forgets or misnames fails here.

def _first_hour() -> list[str]:
    blocks = [code for lang, code in _section_blocks("Your first hour") if "export SPOTSWEEP_AMQP_URL" in code]
    assert len(blocks) == 1, "the README's first hour has one distributed block"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


def test_the_first_hour_block_names_every_setting_the_services_need() -> None:
    exported = {m for line in _first_hour() if line.startswith("export ")
                for m in re.findall(r"(SPOTSWEEP_\w+)=", line)}
    assert exported == {"SPOTSWEEP_AMQP_URL", "SPOTSWEEP_DATABASE_URL", "SPOTSWEEP_S3_ENDPOINT", "SPOTSWEEP_S3_BUCKET",
                        "SPOTSWEEP_S3_ACCESS_KEY", "SPOTSWEEP_S3_SECRET_KEY"}


def test_the_first_hour_distributed_sweep_runs_as_printed(cluster: Cluster, tmp_path: Path) -> None:
    # As a reader runs it: without the suite's own root allowance (tests/conftest.py), so that as root the
    # block's flags alone must let the agent start (it exited 78 as root before).
    cluster.env.pop("SPOTSWEEP_ALLOW_ROOT_TRIALS", None)
    commands = [line for line in _first_hour() if not line.startswith("export ")]
    background = [line.rstrip("&").strip() for line in commands if line.endswith("&")]
    foreground = [line for line in commands if not line.endswith("&")]
    assert [shlex.split(c)[1] for c in background] == ["planner", "collector", "agent"]
    for i, line in enumerate(background):
        argv = shlex.split(line)
        assert argv[0] == "spotsweep"
        cluster.start(f"{argv[1]}-{i}", *argv[1:])
    # A reader types the next line once the agent is up; a script that did not wait could submit first and
    # rightly be told that no agent serves the class yet.
    assert wait_until(lambda: _consumers(cluster.env["SPOTSWEEP_AMQP_URL"], "spotsweep.trials.cpu") >= 1, 60), \
        cluster.logs()
    outputs = []
    for line in foreground:
        argv = shlex.split(line)
        assert argv[0] == "spotsweep"
        run = subprocess.run([sys.executable, "-m", "spotsweep", *argv[1:]], cwd=README.parent, env=cluster.env,
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, (line, run.stdout[-2000:], run.stderr[-3000:])
        assert "no agent serves" not in run.stderr, run.stderr  # the block's agent serves the examples' class
        outputs.append(run.stdout)
    report = outputs[-1]
    assert report.count("mlp_") >= 6 and "val_loss" in report, report  # the six quickstart trials, ranked
