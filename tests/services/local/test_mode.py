"""``spotsweep run``: the embedded default, as a user runs it from a fresh shell.

A real sweep of the shipped examples through the in-process broker, the
embedded PostgreSQL and a local artifact directory; nothing configured.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotsweep.services.local.run import concurrency_note

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run_cli(*args: str, home: Path, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def noop_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    tmp = tmp_path_factory.mktemp("local")
    home = tmp / "home"
    proc = run_cli("run", str(EXAMPLES / "noop.yaml"), "--workers", "3", "--csv", "out.csv", home=home, cwd=tmp)
    return proc, tmp, home


def test_run_completes_and_ranks_the_best_trial_first(noop_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    proc, tmp, _ = noop_run
    assert proc.returncode == 0, proc.stderr
    board = proc.stdout
    assert "noop_03_x0_y-1" in board
    assert board.index("noop_03_x0_y-1") < board.index("noop_04_x0_y0") < board.index("noop_02_x-1_y1")
    with (tmp / "out.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9
    assert list(rows[0])[:5] == ["trial_name", "state", "x", "y", "score"]
    best = rows[0]
    assert (best["trial_name"], best["state"], best["x"], best["y"]) == ("noop_03_x0_y-1", "completed", "0", "-1")
    assert float(best["score"]) == pytest.approx(0.25)
    assert "trials 9/9 · running 0 · best score 0.25" in proc.stderr  # the last progress line (no terminal here)
    assert "Traceback" not in proc.stderr


def test_results_stay_queryable_after_the_run(noop_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    proc, tmp, home = noop_run
    sweep_id = proc.stdout.strip().splitlines()[-1]
    report = run_cli("report", sweep_id, "--csv", "again.csv", home=home, cwd=tmp)
    assert report.returncode == 0, report.stderr
    assert (tmp / "again.csv").read_text() == (tmp / "out.csv").read_text()
    ls = run_cli("ls", "--filter", "name=noop_0[34]*", home=home, cwd=tmp)
    assert ls.returncode == 0 and "noop_03_x0_y-1" in ls.stdout and "noop_04_x0_y0" in ls.stdout
    assert "noop_05" not in ls.stdout
    status = run_cli("status", sweep_id, "--json", home=home, cwd=tmp)
    assert status.returncode == 0 and '"completed": 9' in status.stdout


def test_a_failing_trial_makes_run_exit_non_zero_and_says_why(tmp_path: Path) -> None:
    spec = tmp_path / "fail.yaml"
    spec.write_text(
        "name: fails.v2\n"  # a dot in the name: event routing keys must still reach the planner
        "command: [python, -c, \"import sys; from spotsweep import trial; trial.report(1, v=1.0); "
        "sys.exit('bad trial ' + str(trial.params['k']) if trial.params['k'] == 2 else 0)\"]\n"
        "metric: {name: v, mode: max}\n"
        "space: {k: [1, 2]}\n"
        "retries: {max_failures: 1}\n"
        "resources: {gpus: 0, class: cpu}\n"
    )
    proc = run_cli("run", str(spec), "--csv", "f.csv", home=tmp_path / "home", cwd=tmp_path)
    assert proc.returncode == 1
    assert "fails.v2_0001: failed: bad trial 2" in proc.stdout
    rows = {r["trial_name"]: r for r in csv.DictReader((tmp_path / "f.csv").open())}
    assert rows["fails.v2_0001"]["state"] == "failed" and rows["fails.v2_0001"]["attempts"] == "2"
    assert rows["fails.v2_0000"]["state"] == "completed"


def test_a_sweep_whose_every_trial_failed_ends_failed_with_their_error(tmp_path: Path) -> None:
    spec = tmp_path / "typo.yaml"
    spec.write_text("name: typo\ncommand: [python, no_such_train.py, '--k={k}']\nmetric: {name: v}\n"
                    "space: {k: [1, 2]}\nretries: {max_failures: 0}\nresources: {gpus: 0, class: cpu}\n")
    home = tmp_path / "home"
    proc = run_cli("run", str(spec), home=home, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    sweep_id = proc.stdout.strip().splitlines()[-1]
    status = run_cli("status", sweep_id, "--json", home=home, cwd=tmp_path)
    (row,) = json.loads(status.stdout)
    assert row["state"] == "failed" and row["failed"] == 2
    assert row["error"].startswith("every trial failed (2); the first one: ") and "no_such_train.py" in row["error"]


def test_the_quickstart_example_trains_for_real(tmp_path: Path) -> None:
    proc = run_cli("run", str(EXAMPLES / "quickstart.yaml"), "--workers", "2", "--csv", "q.csv", home=tmp_path / "home",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # said once, before the progress bar: the spec allows 4 at once, --workers 2 runs 2
    assert proc.stderr.count("running 2 trial(s) at once, not the spec's max_concurrent 4: --workers is 2") == 1
    rows = list(csv.DictReader((tmp_path / "q.csv").open()))
    assert len(rows) == 6 and {r["state"] for r in rows} == {"completed"}
    # params in the spec's order; the script's "lr" metric (the schedule) must not shadow the "lr" param
    assert list(rows[0])[:5] == ["trial_name", "state", "lr", "hidden", "val_loss"] and "metric:lr" in rows[0]
    losses = [float(r["val_loss"]) for r in rows]
    assert losses == sorted(losses) and losses[0] < 0.69  # learned something: below chance-level log-loss


def test_run_says_why_it_runs_fewer_trials_at_once_than_the_spec_allows_and_only_then() -> None:
    assert concurrency_note(2, 4, 6, 2) == ("running 2 trial(s) at once, not the spec's max_concurrent 4: --workers is 2 "
                                            "(default 2; this machine has 2 CPU cores); --workers 4 runs 4 at once")
    assert concurrency_note(2, 20, 3, None) is not None and "--workers 3 runs 3" in concurrency_note(2, 20, 3, None)
    assert concurrency_note(4, 4, 6, 2) is None  # as many as the spec allows
    assert concurrency_note(2, 4, 2, 2) is None  # every trial runs at once anyway
    assert concurrency_note(2, 1, 6, 2) is None  # the spec allows fewer than --workers


def test_bad_spec_is_refused_with_the_field_and_no_traceback(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\ncommand: [echo, '{nope}']\nmetric: {name: v}\nspace: {a: [1]}\n")
    for cmd in ("run", "validate"):
        proc = run_cli(cmd, str(spec), home=tmp_path / "home", cwd=tmp_path)
        assert proc.returncode == 2
        assert "command[1]" in proc.stderr and "nope" in proc.stderr
        assert "Traceback" not in proc.stderr
    spec.write_text("name: x\n  bad: [indent\n")
    proc = run_cli("validate", str(spec), home=tmp_path / "home", cwd=tmp_path)
    assert proc.returncode == 2 and "line 2" in proc.stderr and "Traceback" not in proc.stderr


ASHA_SCRIPT = "import sys; from spotsweep import trial; x, n = float(sys.argv[1]), int(sys.argv[2]); trial.report(n, loss=x + 1 / n)"


def test_an_asha_sweep_runs_locally_prunes_most_and_exits_zero(tmp_path: Path) -> None:
    import yaml

    spec = {"name": "asha", "command": ["python", "-c", ASHA_SCRIPT, "{x}", "{steps}"], "metric": {"name": "loss"},
            "space": {"x": [1, 2, 3, 4, 5, 6]}, "max_concurrent": 1,
            "strategy": {"type": "asha", "budget": {"param": "steps", "min": 1, "max": 9}, "eta": 3}}
    (tmp_path / "asha.yaml").write_text(yaml.safe_dump(spec))
    proc = run_cli("run", "asha.yaml", "--workers", "1", "--csv", "asha.csv", home=tmp_path / "home", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # pruned trials are what early stopping is for, not failures
    with (tmp_path / "asha.csv").open() as f:
        rows = {r["x"]: r for r in csv.DictReader(f)}
    assert rows["1"]["state"] == "completed" and rows["1"]["steps"] == "9"  # the best went all the way, one trial
    assert sum(r["state"] == "pruned" for r in rows.values()) >= 3
