"""The project's own worker image, built as a user builds it: ``make images`` (deploy/images.sh, no registry).

Built once per test session, so the image always holds the code under test: an unchanged tree rebuilds
in seconds (every layer cached), a code change rebuilds the wheel layer only. A machine without a
container runtime skips (fails in CI: :func:`tests.support.trial_image.need`).
"""

from __future__ import annotations

import functools
import subprocess

from tests.support.trial_image import ROOT, need

WORKER = "spotsweep-worker:cpu"


@functools.cache
def worker_image() -> str:
    """:data:`WORKER` in Docker's store, freshly built from this tree by ``make images``."""
    need("docker")
    built = subprocess.run(["make", "images"], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    assert built.returncode == 0, f"make images failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    return WORKER
