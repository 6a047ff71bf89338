"""The goodput benchmark's trial: a deterministic stepping script that checkpoints.

Each step takes ``--step-s`` seconds of wall clock, paced against absolute
deadlines from the run's start (so a busy machine's jitter does not change
how many steps a second of slot time is worth, clean or faulted). It reports
a metric each step, writes its state (and ``--ckpt-kib`` of payload, so an
upload is not free) every ``--ckpt-every`` steps and on SIGTERM, through a
temp file renamed into place, and resumes from the restored state.

Every run appends to the trace file ``BENCH_TRACE`` (one ``write`` per line,
``O_APPEND``: lines from concurrent runs never interleave):

* ``k pid start RESUME TIME``: the run began at step RESUME (0: from scratch);
* ``k pid step N TIME``: step N is done;
* ``k pid mismatch RESUME STATE``: the agent said it restored one step and the
  state holds another (a bug the benchmark reports).

The benchmark reads the steps each run executed and lost from this trace.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from spotsweep import trial


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-s", type=float, required=True)
    p.add_argument("--ckpt-every", type=int, required=True)
    p.add_argument("--ckpt-kib", type=int, default=256)
    args = p.parse_args()
    k = int(trial.params["k"])
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    fd = os.open(os.environ["BENCH_TRACE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def trace(*fields: object) -> None:
        os.write(fd, (" ".join(str(f) for f in (k, pid, *fields)) + "\n").encode())

    path = trial.checkpoint_dir / "state.json"
    step = 0
    if path.exists():
        step = int(json.loads(path.read_text())["step"])
        if trial.resume_step is not None and trial.resume_step != step:
            trace("mismatch", trial.resume_step, step)
    trace("start", step, f"{time.time():.3f}")

    def save() -> None:
        (trial.checkpoint_dir / "payload.bin").write_bytes(os.urandom(args.ckpt_kib * 1024))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step}))
        os.replace(tmp, path)
        trial.checkpoint_saved(step)

    begun, first = time.monotonic(), step
    while step < args.steps:
        delay = begun + (step + 1 - first) * args.step_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        step += 1
        trial.report(step, loss=1.0 / (step + k))
        trace("step", step, f"{time.time():.3f}")
        if stop:
            save()
            return 143
        if step % args.ckpt_every == 0:
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
