"""S3 inputs on a machine without an S3 store: `validate` says `run` would refuse them, and `run` refuses up
front with the field named (it started the sweep and failed each trial at staging before; issue 40)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPEC = """\
name: s3in
command: ["python", "-c", "print(1)"]
metric: {name: loss}
space: {x: [1]}
resources: {gpus: 0}
inputs: [{from: "s3://bucket/data/v1/", to: data}]
"""


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")} | {"SPOTSWEEP_HOME": str(tmp / "home")}
    return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=env, cwd=tmp, capture_output=True, text=True,
                          timeout=120)


def test_s3_inputs_without_a_store_are_named_by_validate_and_refused_by_run(tmp_path: Path) -> None:
    (tmp_path / "s3.yaml").write_text(SPEC)
    why = "inputs[0].from: s3://bucket/data/v1/ is staged from an S3 store, and this machine has none: set SPOTSWEEP_S3_ENDPOINT"
    checked = cli(tmp_path, "validate", "s3.yaml")
    assert checked.returncode == 0 and checked.stdout.startswith("ok: s3in"), checked
    assert why in checked.stderr and "`spotsweep run` here would refuse it" in checked.stderr, checked.stderr
    ran = cli(tmp_path, "run", "s3.yaml")
    assert ran.returncode == 2 and ran.stderr.startswith(f"error: {why}"), ran.stderr
    assert "Traceback" not in ran.stderr and "started" not in ran.stderr  # refused before any sweep began
