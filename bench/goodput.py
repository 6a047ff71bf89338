"""Goodput under preemption: how much of a spot pool's slot time a sweep turns into
useful training steps when its nodes are preempted, against the same pool left alone.

A sweep of a deterministic stepping script that checkpoints
(``bench/goodput_trial.py``) runs on ``--agents`` agents over the real services
(RabbitMQ: a fresh vhost on the system broker; PostgreSQL: a fresh database; S3:
moto's server started here), for a fixed window of ``--window`` seconds, once
clean and once with preemptions, for each checkpoint interval in ``--intervals``.
Time is scaled down: ``--minute-s`` seconds of this run stand for one minute of
trial time, and the preemption rate is scaled the same way (``--preempt-every``
minutes of an agent's life, on average, between its preemptions: exponential
lifetimes, seeded per pool position, the same in every faulted run). Each
preemption is a SIGTERM (the agent drains: the trial checkpoints, the agent
uploads it, reports and exits) or, with probability ``--kill9-share``, a kill -9
of the agent and its trials with no notice; a fresh agent takes its place at once,
as a spot pool would.

It reports, per checkpoint interval:

* goodput: useful steps per slot-second (slot time counted from an agent's ready
  to its exit or kill; a replacement's boot is the cloud's, not counted) in the
  faulted run as a share of the clean run's;
* recovery per preemption (p50, p99): from the kill to the trial's next
  ``trial.started`` on another agent, from the journal (``trial_events``);
* steps lost per preemption, and what a restart-from-scratch system (SkyPilot's
  default recovery, W&B sweeps' rerun) would lose on the same schedule;
* a projection to real time: the slot-seconds each preemption cost, split into
  lost steps (which scale with the time unit) and fixed seconds (which do not).

    python bench/goodput.py            # about 8 minutes on 2 cores
    python bench/goodput.py --quick    # one interval, short windows: about a minute
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import goodput_report
import harness
import psycopg
from goodput_pool import Pool
from goodput_stats import preemptions, read_trace, slot_seconds, useful_steps

TRIAL = Path(__file__).resolve().parent / "goodput_trial.py"


def spec(args: argparse.Namespace, run_no: int, ckpt_every: int, trace: Path) -> dict[str, Any]:
    steps = round(args.trial_minutes * args.minute_s / args.step_s)
    slots = args.agents * args.slots
    trials = slots * (int(args.window / (args.trial_minutes * args.minute_s)) + 3)
    return {
        "name": f"goodput-{run_no}",
        "command": [sys.executable, str(TRIAL), "--steps", str(steps), "--step-s", str(args.step_s),
                    "--ckpt-every", str(ckpt_every), "--ckpt-kib", str(args.ckpt_kib)],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"k": list(range(trials))},
        "max_concurrent": args.max_concurrent or slots,
        "retries": {"max_failures": 0, "max_lost": 100},  # a failure is a bug here
        "env": {"BENCH_TRACE": str(trace)},
        "resources": {"gpus": 0, "class": f"goodput{run_no}"},
    }


def journal(db_url: str, sweep_id: str) -> tuple[list[dict[str, Any]], dict[str, int], dict[str, int]]:
    """The sweep's events once the journal stops growing, each trial's k, and trials by state."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        last, deadline = -1, time.monotonic() + 15
        while time.monotonic() < deadline:
            n = conn.execute("SELECT count(*) FROM trial_events WHERE sweep_id = %s", (sweep_id,)).fetchone()
            if n and n[0] == last:
                break
            last = n[0] if n else -1
            time.sleep(0.5)
        events = [{"trial_id": t, "attempt": a, "kind": k, "body": b} for t, a, k, b in conn.execute(
            "SELECT trial_id, attempt, kind, body FROM trial_events WHERE sweep_id = %s", (sweep_id,))]
        rows = conn.execute("SELECT trial_id, params, state FROM trial_results WHERE sweep_id = %s", (sweep_id,)).fetchall()
    states: dict[str, int] = {}
    for _, _, state in rows:
        states[state] = states.get(state, 0) + 1
    return events, {t: int(p["k"]) for t, p, _ in rows}, states


def one_run(c: harness.Cluster, args: argparse.Namespace, run_no: int, interval: float, faulted: bool,
            tmp: Path) -> dict[str, Any]:
    ckpt_every = max(1, round(interval * args.minute_s / args.step_s))
    mean_life = args.preempt_every * args.minute_s if faulted else None
    pool = Pool(c, f"r{run_no}", f"goodput{run_no}", args.agents, args.slots, args.grace, mean_life, args.kill9_share,
                args.seed)
    pool.wait_ready()
    trace = tmp / f"trace-{run_no}"
    trace.touch()
    sweep_id, t0 = harness.submit(c.amqp_url, spec(args, run_no, ckpt_every, trace))
    t_end, last_kill = t0 + args.window, t0 + args.window - args.margin
    while (now := time.time()) < t_end:
        pool.tick(preempt=faulted and now < last_kill)
        time.sleep(0.02)
    pool.end(t_end)
    events, k_of, states = journal(c.db_url, sweep_id)
    subprocess.run([sys.executable, "-m", "spotsweep", "cancel", sweep_id], env=c.env, capture_output=True, timeout=60)
    tr = read_trace(trace.read_text().splitlines(), t_end)
    steps = useful_steps(tr)
    slot_s = slot_seconds(pool.lives(), args.slots, t0, t_end)
    rows, bugs = preemptions(pool.kills, events, k_of, tr, ckpt_every)
    bugs += tr.mismatches + [f"{n} trial(s) {s}" for s, n in states.items() if s == "failed"]
    return {"run": run_no, "interval_min": interval, "ckpt_every": ckpt_every, "faulted": faulted, "sweep": sweep_id,
            "slot_seconds": slot_s, **steps, "goodput": steps["useful"] / slot_s,
            "scratch_goodput": steps["scratch_useful"] / slot_s, "kills": len(pool.kills), "preemptions": rows, "boot_s": pool.boots(),
            "bugs": bugs, "states": states, "load_1m": harness.load_1m()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: one interval, 25 s windows (about a minute)")
    ap.add_argument("--intervals", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="checkpoint intervals, minutes")
    ap.add_argument("--minute-s", type=float, default=2.0, help="seconds of this run that stand for one minute")
    ap.add_argument("--step-s", type=float, default=0.05, help="seconds per training step")
    ap.add_argument("--preempt-every", type=float, default=10.0, help="mean minutes of an agent's life between preemptions")
    ap.add_argument("--kill9-share", type=float, default=0.5, help="share of preemptions that are kill -9 without notice")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--slots", type=int, default=1, help="slots per agent")
    ap.add_argument("--window", type=float, default=60.0, help="seconds measured per run")
    ap.add_argument("--margin", type=float, default=6.0, help="no preemption in the window's last seconds")
    ap.add_argument("--max-concurrent", type=int, default=0,
                    help="the spec's max_concurrent; 0: the pool's slots (no fresh trial queued ahead of a preempted one)")
    ap.add_argument("--trial-minutes", type=float, default=8.0, help="a trial's length, minutes")
    ap.add_argument("--ckpt-kib", type=int, default=256, help="checkpoint payload, KiB")
    ap.add_argument("--grace", type=float, default=10.0, help="the agents' --grace, seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.intervals, args.window, args.agents = [1.0], 25.0, 3
    runs: list[dict[str, Any]] = []
    with harness.services() as svc, harness.moto_s3() as s3, \
            tempfile.TemporaryDirectory(prefix="bench-goodput-") as tmp, \
            harness.cluster(svc, "goodput", Path(tmp), s3=s3) as c:
        c.control_plane()
        for interval in args.intervals:
            for faulted in (False, True):
                run = one_run(c, args, len(runs), interval, faulted, Path(tmp))
                runs.append(run)
                print(goodput_report.run_line(run), flush=True)
    summary = goodput_report.summarise(runs, args)
    print(goodput_report.tables(summary, args))
    bugs = [b for r in runs for b in r["bugs"]]
    print("bugs found: " + ("; ".join(bugs) if bugs else "none (no trial failed, none resumed at step 0 after a checkpoint)"))
    path = harness.write_json("goodput", {"args": vars(args) | {"json": str(args.json)}, "summary": summary,
                                          "runs": runs, "bugs": bugs}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
