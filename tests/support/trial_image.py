"""A trial image built with no registry, for the container runtime tests (issue 30).

The base is deploy/base-image.sh's (Debian 12's python3 made with mmdebstrap and
``docker import``ed where Docker Hub cannot be reached, as in CI); the trial image
adds a marker file that only the image holds, so a test can tell the command ran
inside it. Podman gets the same image from Docker's store (``docker save | podman
load``). A runtime that is not there skips its tests, except in CI
(``SPOTSWEEP_REQUIRE_CONTAINERS`` set by ``.ci/run``, whose ``make test`` installs and starts
both), where a skip would hide a broken path: there it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

IMAGE = "spotsweep-trial-test:1"
MARKER = "/etc/spotsweep-trial-marker"
MARKER_TEXT = "inside spotsweep-trial-test"
ROOT = Path(__file__).resolve().parents[2]


def _ok(*argv: str, timeout: float = 60) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def need(runtime: str) -> str:
    """The runtime's binary, or skip (fail in CI) when it cannot run containers here."""
    binary = shutil.which(runtime)
    if binary is None or not _ok(binary, "info"):
        why = f"{runtime} cannot run containers here (deploy/container-runtime.sh installs and starts it)"
        if os.environ.get("SPOTSWEEP_REQUIRE_CONTAINERS"):
            pytest.fail(why)
        pytest.skip(why)
    return binary


def trial_image(runtime: str = "docker") -> str:
    """:data:`IMAGE` in ``runtime``'s store, built the first time (about 30 s for the base, once per machine)."""
    binary = need(runtime)
    if _ok(binary, "image", "inspect", IMAGE):
        return IMAGE
    if runtime != "docker":
        docker_image = trial_image("docker")
        save = subprocess.Popen([need("docker"), "save", docker_image], stdout=subprocess.PIPE)
        subprocess.run([binary, "load"], stdin=save.stdout, check=True, capture_output=True, timeout=600)
        save.wait(60)
        return IMAGE
    base = subprocess.run([str(ROOT / "deploy" / "base-image.sh")], capture_output=True, text=True, check=True,
                          timeout=900).stdout.strip()
    created = subprocess.run([binary, "create", base], capture_output=True, text=True, check=True).stdout.strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            marker = Path(tmp) / "marker"
            marker.write_text(MARKER_TEXT)
            subprocess.run([binary, "cp", str(marker), f"{created}:{MARKER}"], check=True, capture_output=True)
        subprocess.run([binary, "commit", created, IMAGE], check=True, capture_output=True)
    finally:
        subprocess.run([binary, "rm", "--force", created], capture_output=True, check=False)
    return IMAGE
