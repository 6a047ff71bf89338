"""`spotsweep extend` of a local sweep (no SPOTSWEEP_DATABASE_URL): the running `run` takes it, or the next `resume`.

A local sweep's planner lives in the process that runs it, which no RabbitMQ
message reaches: the extension is left in SPOTSWEEP_HOME for that process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import wait_until

TRIAL = '''
import sys, time
from pathlib import Path
from spotsweep import trial

gate = Path(sys.argv[1]) / "release"
if int(trial.params["gated"]):
    while not gate.exists():
        time.sleep(0.02)
trial.report(1, loss=float(trial.params["x"]))
'''

SPEC = """
name: grow
command: [python, {script}, {out}]
metric: {{name: loss, mode: min}}
space:
  x: {{type: uniform, low: 0, high: 1}}
  gated: [{gated}]
strategy: {{type: random, trials: 2}}
max_concurrent: 2
resources: {{gpus: 0, class: cpu}}
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return {**env, "SPOTSWEEP_HOME": str(home)}


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=_env(tmp / "home"), cwd=tmp,
                          capture_output=True, text=True, timeout=180)


def counts(tmp: Path, sweep_id: str) -> dict[str, object]:
    status = cli(tmp, "status", sweep_id, "--json")
    assert status.returncode == 0, status.stderr
    return dict(json.loads(status.stdout)[0])


def write_spec(tmp: Path, gated: int) -> None:
    (tmp / "trial.py").write_text(TRIAL)
    (tmp / "spec.yaml").write_text(SPEC.format(script=tmp / "trial.py", out=tmp, gated=gated))


def test_extend_of_a_finished_local_sweep_is_run_by_resume(tmp_path: Path) -> None:
    write_spec(tmp_path, gated=0)
    ran = cli(tmp_path, "run", "spec.yaml")
    assert ran.returncode == 0, ran.stderr
    sweep_id = ran.stdout.split()[-1]

    extended = cli(tmp_path, "extend", "grow", "--trials", "1")  # by name: the newest sweep of that name
    assert extended.returncode == 0, extended.stderr
    assert f"3 trial(s) in all; `spotsweep resume {sweep_id}` runs it" in extended.stdout
    resumed = cli(tmp_path, "resume", sweep_id)
    assert resumed.returncode == 0, resumed.stderr
    after = counts(tmp_path, sweep_id)
    assert (after["state"], after["total_trials"], after["completed"]) == ("completed", 3, 3)
    again = cli(tmp_path, "resume", sweep_id)  # the extension was taken once
    assert again.returncode == 0 and "already ended: completed" in again.stderr

    for command in ("extend", "cancel"):  # a sweep this SPOTSWEEP_HOME does not know is refused, naming it
        args = ("--trials", "1") if command == "extend" else ()
        unknown = cli(tmp_path, command, "grow-0000000a", *args)
        assert unknown.returncode == 2 and "no sweep has the id or name 'grow-0000000a'" in unknown.stderr


def test_extend_of_a_running_local_sweep_is_taken_by_its_run(tmp_path: Path) -> None:
    write_spec(tmp_path, gated=1)
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "run", "spec.yaml"], env=_env(tmp_path / "home"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def running() -> bool:
            status = cli(tmp_path, "status", "--json")
            rows = json.loads(status.stdout) if status.returncode == 0 else []
            return bool(rows) and rows[0]["running"] == 2

        assert wait_until(lambda: running() or proc.poll() is not None, 90) and proc.poll() is None
        extended = cli(tmp_path, "extend", "grow", "--trials", "2")
        assert extended.returncode == 0 and "the `spotsweep run` running it takes it" in extended.stdout, extended.stderr
        (tmp_path / "release").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    after = counts(tmp_path, out.split()[-1])
    assert (after["state"], after["total_trials"], after["completed"]) == ("completed", 4, 4)
