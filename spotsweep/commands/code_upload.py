"""``spotsweep submit``'s part of a spec's ``workdir``: pack it, upload it once, name it in the spec.

The archive goes to the artifact store the agents read (``SPOTSWEEP_S3_*``)
as ``code/<sha256>.tar.gz``, and the spec is posted with ``workdir_sha256``;
the planner passes the hash on in every trial message, ``extend`` included
(it re-uses the stored spec), so a sweep keeps its code version for good.
A spec that already carries a hash is posted as it is. Local mode never
packs: it runs trials in the workdir itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from spotsweep.shared import codepack
from spotsweep.shared.artifacts import open_store
from spotsweep.shared.settings import Settings
from spotsweep.shared.spec import SweepSpec


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def with_code(spec: SweepSpec, settings: Settings, say: Callable[[str], None] = _stderr) -> SweepSpec:
    """``spec`` with ``workdir_sha256`` set, its workdir packed and in the store; as it is without a workdir."""
    if spec.workdir is None or spec.workdir_sha256 is not None:
        return spec
    if not settings.s3_endpoint:
        say(f"warning: workdir: SPOTSWEEP_S3_ENDPOINT is unset, so the code goes to {settings.home / 'artifacts'} on "
            "this machine: only agents here, with the same SPOTSWEEP_HOME, can run these trials")
    limit = int(settings.workdir_limit_mib * codepack.MiB)
    done = codepack.publish(open_store(settings), Path(spec.workdir), limit)
    what = "uploaded" if done.uploaded else "already in the store"
    say(f"workdir: {done.files} file(s), {done.size / 1024:.1f} KiB, packed as {done.key} "
        f"({done.archive_size / 1024:.1f} KiB): {what}")
    return spec.model_copy(update={"workdir_sha256": done.sha256})
