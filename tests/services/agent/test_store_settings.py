"""An agent without S3 says loudly that its checkpoints cannot resume elsewhere, or refuses with --require-s3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/%2F"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    return {**env, "SPOTSWEEP_HOME": str(tmp), "SPOTSWEEP_AMQP_URL": UNREACHABLE,
            "SPOTSWEEP_ALLOW_ROOT_TRIALS": os.environ["SPOTSWEEP_ALLOW_ROOT_TRIALS"], **extra}


def test_require_s3_refuses_to_start_without_an_endpoint(tmp_path: Path) -> None:
    for args, extra in ((["--require-s3"], {}), ([], {"SPOTSWEEP_REQUIRE_S3": "true"})):
        proc = subprocess.run([sys.executable, "-m", "spotsweep", "agent", *args], env=_env(tmp_path, **extra),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "--require-s3: SPOTSWEEP_S3_ENDPOINT is not set" in proc.stderr and "Traceback" not in proc.stderr


def test_an_agent_without_s3_warns_at_start(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "spotsweep", "agent", "--no-require-s3"], env=_env(tmp_path),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        seen = [proc.stderr.readline() for _ in range(3)]  # the warning comes before any connection attempt
        assert any("SPOTSWEEP_S3_ENDPOINT is not set" in line and "restarts from step 0" in line for line in seen), seen
    finally:
        proc.kill()
        proc.wait()
