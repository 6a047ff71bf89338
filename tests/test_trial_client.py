"""``spotsweep.trial`` as a trial script sees it: a fresh process with the contract's environment.

Each test runs a tiny script in a subprocess, because the module reads the
environment once, at import, exactly as it does under an agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONTRACT_VARS = (
    "SPOTSWEEP_PARAMS",
    "SPOTSWEEP_SWEEP_ID",
    "SPOTSWEEP_TRIAL_ID",
    "SPOTSWEEP_TRIAL_NAME",
    "SPOTSWEEP_ATTEMPT",
    "SPOTSWEEP_METRICS",
    "SPOTSWEEP_CHECKPOINT_DIR",
    "SPOTSWEEP_RESUME_STEP",
)


def run_script(
    code: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with only the given contract variables set."""
    full_env = {k: v for k, v in os.environ.items() if k not in CONTRACT_VARS}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture()
def managed_env(tmp_path: Path) -> dict[str, str]:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    return {
        "SPOTSWEEP_PARAMS": json.dumps({"lr": 0.003, "hidden": 64, "name": "a b", "tags": [1, 2]}),
        "SPOTSWEEP_SWEEP_ID": "sw1",
        "SPOTSWEEP_TRIAL_ID": "tr1",
        "SPOTSWEEP_TRIAL_NAME": "mlp_00",
        "SPOTSWEEP_ATTEMPT": "2",
        "SPOTSWEEP_METRICS": str(tmp_path / "metrics.jsonl"),
        "SPOTSWEEP_CHECKPOINT_DIR": str(ckpt),
        "SPOTSWEEP_RESUME_STEP": "40",
    }


def test_report_appends_exact_lines(tmp_path: Path, managed_env: dict[str, str]) -> None:
    metrics = Path(managed_env["SPOTSWEEP_METRICS"])
    metrics.write_text('{"step": 0, "loss": 9.0}\n')  # an earlier attempt's line must survive
    run_script(
        """
        from spotsweep import trial
        trial.report(10, loss=0.31, val_loss=0.35)
        trial.report(11, loss=1.0, resumed_from=11)
        trial.checkpoint_saved(11)
        """,
        tmp_path,
        managed_env,
    )
    assert metrics.read_text() == (
        '{"step": 0, "loss": 9.0}\n'
        '{"step": 10, "loss": 0.31, "val_loss": 0.35}\n'
        '{"step": 11, "loss": 1.0, "resumed_from": 11}\n'  # an int stays an int
        '{"checkpoint": 11}\n'
    )


def test_environment_is_exposed(tmp_path: Path, managed_env: dict[str, str]) -> None:
    out = run_script(
        """
        import json, sys
        from spotsweep import trial
        json.dump({
            "params": trial.params, "sweep_id": trial.sweep_id, "trial_id": trial.trial_id,
            "trial_name": trial.trial_name, "attempt": trial.attempt, "resume_step": trial.resume_step,
            "checkpoint_dir": str(trial.checkpoint_dir), "is_managed": trial.is_managed,
        }, sys.stdout)
        """,
        tmp_path,
        managed_env,
    ).stdout
    assert json.loads(out) == {
        "params": {"lr": 0.003, "hidden": 64, "name": "a b", "tags": [1, 2]},
        "sweep_id": "sw1",
        "trial_id": "tr1",
        "trial_name": "mlp_00",
        "attempt": 2,
        "resume_step": 40,
        "checkpoint_dir": managed_env["SPOTSWEEP_CHECKPOINT_DIR"],
        "is_managed": True,
    }
    # Nothing goes to the metrics file unless the script reports.
    assert not Path(managed_env["SPOTSWEEP_METRICS"]).exists()


def test_unmanaged_prints_lines_and_uses_local_checkpoints(tmp_path: Path) -> None:
    proc = run_script(
        """
        from spotsweep import trial
        print(trial.params, trial.attempt, trial.resume_step, trial.is_managed, trial.trial_id)
        print(trial.checkpoint_dir)
        trial.report(3, acc=0.5)
        trial.checkpoint_saved(3)
        """,
        tmp_path,
    )
    assert proc.stdout.splitlines() == [
        "{} 1 None False None",
        str(tmp_path.resolve() / "checkpoints"),
        '{"step": 3, "acc": 0.5}',
        '{"checkpoint": 3}',
    ]
    assert (tmp_path / "checkpoints").is_dir()


def test_non_finite_metrics_are_json_strings(tmp_path: Path, managed_env: dict[str, str]) -> None:
    run_script(
        """
        from spotsweep import trial
        trial.report(1, a=float("nan"), b=float("inf"), c=-float("inf"), d=2)
        """,
        tmp_path,
        managed_env,
    )
    line = Path(managed_env["SPOTSWEEP_METRICS"]).read_text()
    assert line == '{"step": 1, "a": "NaN", "b": "Infinity", "c": "-Infinity", "d": 2}\n'

    def strict(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    json.loads(line, parse_constant=strict)  # valid for a strict parser, not just Python's


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("trial.report(1.5, loss=1.0)", "TypeError: step must be an int, got float 1.5"),
        ("trial.report('3', loss=1.0)", "TypeError: step must be an int, got str '3'"),
        ("trial.report(True, loss=1.0)", "TypeError: step must be an int, got bool True"),
        ("trial.checkpoint_saved(2.0)", "TypeError: step must be an int, got float 2.0"),
        ("trial.report(-1, loss=1.0)", "ValueError: step must be between 0 and 9223372036854775807, got -1"),
        ("trial.report(2**63, loss=1.0)", "ValueError: step must be between 0 and 9223372036854775807, got 9223372036854775808"),
        ("trial.report(1, loss='0.3')", "TypeError: metric 'loss' must be a number, got str '0.3'"),
        ("trial.report(1, loss=None)", "TypeError: metric 'loss' must be a number, got NoneType None"),
        ("trial.report(1, ok=True)", "TypeError: metric 'ok' must be a number, got bool True"),
        ("trial.report(1, checkpoint=3)", "ValueError: 'checkpoint' is reserved"),
    ],
)
def test_bad_calls_raise_and_write_nothing(
    tmp_path: Path, managed_env: dict[str, str], call: str, error: str
) -> None:
    proc = run_script(f"from spotsweep import trial\n{call}\n", tmp_path, managed_env, check=False)
    assert proc.returncode == 1
    assert error in proc.stderr
    assert not Path(managed_env["SPOTSWEEP_METRICS"]).exists()


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"SPOTSWEEP_PARAMS": "[1, 2]"}, "SPOTSWEEP_PARAMS must be a JSON object, got list"),
        ({"SPOTSWEEP_PARAMS": "{lr: 1}"}, "JSONDecodeError"),
        ({"SPOTSWEEP_ATTEMPT": "two"}, "SPOTSWEEP_ATTEMPT must be an integer, got 'two'"),
    ],
)
def test_malformed_environment_fails_at_import(tmp_path: Path, env: dict[str, str], error: str) -> None:
    proc = run_script("from spotsweep import trial\ntrial.params\n", tmp_path, env, check=False)
    assert proc.returncode == 1
    assert error in proc.stderr


def test_import_does_not_load_torch(tmp_path: Path, managed_env: dict[str, str]) -> None:
    out = run_script(
        "import sys\nfrom spotsweep import trial\ntrial.report(1, x=1.0)\nprint('torch' in sys.modules)\n",
        tmp_path,
        managed_env,
    ).stdout
    assert out.strip() == "False"


def test_concurrent_writers_never_split_lines(tmp_path: Path, managed_env: dict[str, str]) -> None:
    # Two processes appending long lines at once: every line must come out whole.
    code = """
        import sys
        from spotsweep import trial
        for i in range(300):
            trial.report(i, **{f"m{j}": float(j) for j in range(40)}, who=float(sys.argv[1]))
        """
    full_env = {k: v for k, v in os.environ.items() if k not in CONTRACT_VARS} | managed_env
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(w)], cwd=tmp_path, env=full_env)
        for w in (1, 2)
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    lines = Path(managed_env["SPOTSWEEP_METRICS"]).read_text().splitlines()
    assert len(lines) == 600
    records = [json.loads(line) for line in lines]
    assert all(len(r) == 42 for r in records)
    assert sorted((r["who"], r["step"]) for r in records) == [(w, i) for w in (1.0, 2.0) for i in range(300)]
