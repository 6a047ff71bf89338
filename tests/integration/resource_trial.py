"""A trial for test_resources.py: holds ``MIB`` of memory (touched, so resident) for ``SECONDS``, notes when it ran
in ``OUT/<trial name>.json``, reports its loss. ``hog`` keeps allocating until something stops it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from spotsweep import trial

role, mib, seconds, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
began = time.time()
held = [b"\1" * (16 << 20) for _ in range(mib // 16)]
if role == "hog":
    for _ in range(200):  # 3.2 GiB in all, 16 MiB at a time
        held.append(b"\1" * (16 << 20))
        time.sleep(0.01)
time.sleep(seconds)
(out / f"{os.environ['SPOTSWEEP_TRIAL_NAME']}.json").write_text(json.dumps({"start": began, "end": time.time()}))
trial.report(1, loss=float(len(held)))
