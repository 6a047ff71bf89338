"""The chaos test's trial: a deterministic computation with checkpoints.

Its loss at each step is a pure function of (k, step), computed by iterating
a 64-bit LCG, so the checker knows every value exactly and can tell a
resumed trial from one restarted at step 0 (and a wrong resume from a right
one: the state must come from the checkpoint). It checkpoints every
``--ckpt-every`` steps and on SIGTERM, to a temp file renamed into place.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from spotsweep import trial

MASK = (1 << 64) - 1


def advance(state: int, k: int) -> int:
    return (state * 6364136223846793005 + 1442695040888963407 + k) & MASK


def loss(state: int) -> float:
    return state / 2.0**64


def expected(k: int, steps: int) -> list[float]:
    """The loss this trial reports at steps 1..steps."""
    out, state = [], k
    for _ in range(steps):
        state = advance(state, k)
        out.append(loss(state))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--pause", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=5)
    args = p.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    path = trial.checkpoint_dir / "state.json"
    step, state = (0, args.k)
    if path.exists():
        saved = json.loads(path.read_text())
        step, state = saved["step"], saved["state"]
        trial.report(step, resumed_from=step)

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "state": state}))
        os.replace(tmp, path)
        trial.checkpoint_saved(step)

    while step < args.steps:
        time.sleep(args.pause)
        step += 1
        state = advance(state, args.k)
        trial.report(step, loss=loss(state))
        if stop:
            save()
            return 143
        if step % args.ckpt_every == 0:
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
