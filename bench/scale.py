"""Scale: one broker, up to a thousand slots. For each slot count in ``--slots``
(agents of ``--agent-slots`` slots each, the last one smaller when it does not
divide), a sweep of ``--rounds`` trials per slot (20 at 1,000 slots: 20,000
trials) runs on fresh services of the production path: planner, collector and
agents as separate processes over RabbitMQ (a fresh vhost on the system broker),
PostgreSQL (a fresh database) and S3 (moto's server).

Each trial is ``bash -c`` that stamps the time (``$EPOCHREALTIME``, a shell
builtin), runs ``sleep D`` with D drawn uniformly from ``--sleep`` (1-5 s: the
sweep's ``random`` strategy, seeded), stamps the time again and writes both stamps
as its one metric line: the shortest honest trial that reports a metric.
1,000 slots of 1-5 s trials offer 333 trial starts a second, more than the
whole stack dispatches on 2 cores, so the sizes in between show where it
stops keeping up, and which part runs out first.

Per slot count it reports:

* the slot idle gap (p50, p99, max): a run's start less the end of the run
  before it on the same slot, from the trials' own stamps (``scale_probe``);
* trials/s achieved against offered (slots / mean sleep) and the slots' busy share;
* CPU per trial (ms) and cores used of every part: planner, collector, agents,
  trial processes, RabbitMQ, PostgreSQL, moto, and ``other`` (the machine's busy
  CPU the stack does not account for: other sessions on a shared machine);
* memory: planner's and collector's RSS and peak, each agent's RSS and USS;
* RabbitMQ's connections and channels on the vhost (``rabbitmqctl``, mid-run).

    python bench/scale.py                          # 100, 250, 500, 1000 slots: about 13 minutes on 2 cores
    python bench/scale.py --slots 100,1000 --rounds 10
    python bench/scale.py --quick                  # 20 and 40 slots, 2 rounds: about a minute
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import psycopg
import scale_probe
import scale_report

TRIAL = ('s=$EPOCHREALTIME; sleep {sleep:.3f}; '
         'printf \'{{"step": 0, "start": %s, "end": %s}}\\n\' "$s" "$EPOCHREALTIME" >> "$SPOTSWEEP_METRICS"')


def spec(n: int, low: float, high: float, concurrent: int, seed: int) -> dict[str, Any]:
    return {
        "name": f"bench-scale-{n}",
        "command": ["/bin/bash", "-c", TRIAL],
        "metric": {"name": "start", "mode": "min"},
        "space": {"sleep": {"type": "uniform", "low": low, "high": high}},
        "strategy": {"type": "random", "trials": n, "seed": seed},
        "max_concurrent": concurrent,
        "retries": {"max_failures": 0},
        "resources": {"gpus": 0, "class": "cpu"},
    }


def layout(slots: int, per_agent: int) -> list[int]:
    """Slots of each agent: ``per_agent`` each, the remainder on one more agent."""
    full, rest = divmod(slots, per_agent)
    return [per_agent] * full + ([rest] if rest else [])


def start_agents(c: harness.Cluster, sizes: list[int]) -> dict[str, int]:
    """Every agent started at once (one by one would take minutes at 50), then awaited;
    returns each agent's id (as the trials table names it) and its slots."""
    for i, n in enumerate(sizes):
        c.start(f"agent{i}", "agent", "--slots", str(n), "--class", "cpu", "--workdir", str(c.tmp / f"work-{i}"))
    ids: dict[str, int] = {}
    for i, n in enumerate(sizes):
        c.wait_log(f"agent{i}", "agent ready", timeout=300)
        log = (c.tmp / f"agent{i}.log").read_text(errors="replace").splitlines()
        ready = next(json.loads(ln) for ln in log if '"agent ready"' in ln)  # the services log JSON lines
        ids[ready["agent"]] = n
    return ids


def wait(c: harness.Cluster, sweep_id: str, timeout: float, sample_at: float, vhost: str,
         pids: dict[str, int]) -> dict[str, Any]:
    """Wait for the sweep's end, reading broker counts and memory once, ``sample_at`` seconds in."""
    deadline, t0 = time.monotonic() + timeout, time.monotonic()
    mid: dict[str, Any] = {}
    with psycopg.connect(c.db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()
            if row and row[0] != "running":
                break
            if not mid and time.monotonic() - t0 >= sample_at:
                mid = sample(vhost, pids)
            if time.monotonic() > deadline:
                raise TimeoutError(f"sweep {sweep_id} not finished after {timeout:.0f}s\n{c.logs()}")
            time.sleep(0.5)  # a slow poll: this loop's queries cost PostgreSQL CPU as well
    return mid or sample(vhost, pids)


def sample(vhost: str, pids: dict[str, int]) -> dict[str, Any]:
    return {"broker": scale_probe.broker_counts(vhost), "memory": scale_probe.memory(pids),
            "tree_scan": scale_probe.tree_scan(), "load_1m": harness.load_1m()}


def idle_cpu(pids: dict[str, int], db_url: str, seconds: float) -> dict[str, Any]:
    """Cores each part uses with every slot idle (no trial anywhere), over ``seconds``,
    and the busiest processes on the machine then."""
    before, procs = scale_probe.cpu(pids, db_url), scale_probe.processes()
    time.sleep(seconds)
    cores = {k: v / seconds for k, v in scale_probe.cpu_delta(before, scale_probe.cpu(pids, db_url)).items()}
    return cores | {"busiest": scale_probe.busiest(procs, scale_probe.processes(), pids.values())}


def runs_of(db_url: str, sweep_id: str) -> tuple[list[tuple[str, float, float]], int]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT agent, metrics->>'start', metrics->>'end', state FROM trials WHERE sweep_id = %s",
                            (sweep_id,)).fetchall()
    done = [(a, float(s), float(e)) for a, s, e, st in rows if st == "completed" and s and e]
    return done, len(rows)


def measure(svc: harness.Services, s3: dict[str, str], tmp: Path, slots: int, args: argparse.Namespace) -> dict[str, Any]:
    """One slot count on fresh services: start, warm up, one measured sweep, stop."""
    sizes = layout(slots, args.agent_slots)
    n = args.trials or args.rounds * slots
    low, high = (float(x) for x in args.sleep.split("-"))
    offered = slots / ((low + high) / 2)  # trial starts per second that the slots ask for
    with harness.cluster(svc, f"s{slots}", Path(tempfile.mkdtemp(dir=tmp, prefix=f"s{slots}-")), s3=s3) as c:
        if args.queue_window:
            c.env["SPOTSWEEP_QUEUE_WINDOW"] = str(args.queue_window)
        c.control_plane()
        t = time.monotonic()
        agent_ids = start_agents(c, sizes)
        boot = time.monotonic() - t
        concurrent = args.concurrent or 2 * slots
        warm_id, _ = harness.submit(c.amqp_url, spec(slots, 0.05, 0.1, concurrent, args.seed + 1))
        harness.wait_sweep(c.db_url, warm_id, 300, poll=0.5)  # every agent's connections, caches, first runs
        pids = {name: p.pid for name, p in c.procs.items()}
        idle = idle_cpu(pids, c.db_url, args.idle)
        harness.settle()
        load = harness.load_1m()
        before, procs = scale_probe.cpu(pids, c.db_url), scale_probe.processes()
        sweep_id, posted = harness.submit(c.amqp_url, spec(n, low, high, concurrent, args.seed))
        ideal = n / offered
        mid = wait(c, sweep_id, 300 + 5 * ideal, min(ideal / 2, 30), svc.vhost, pids)
        after, busiest = scale_probe.cpu(pids, c.db_url), scale_probe.busiest(procs, scale_probe.processes(), pids.values())
        end_memory = scale_probe.memory(pids)
        runs, total = runs_of(c.db_url, sweep_id)
        row = harness.wait_sweep(c.db_url, sweep_id, 10)
    if len(runs) != n or row["state"] != "completed":
        raise RuntimeError(f"{slots} slots: sweep {row['state']}, {len(runs)} of {n} completed ({total} rows)")
    seconds = harness.epoch(row["finished_at"]) - posted
    gaps, drained = scale_probe.slot_gaps(runs, agent_ids)
    busy = sum(e - s for _, s, e in runs)
    mean_run = busy / n
    # Steady state: from the moment every slot had its first run to the moment the first
    # slot found no more work, the sweep always had work to hand out; its start rate there,
    # against the slots' demand, is free of the ramp-up and of the tail (a short sweep's bulk).
    starts = sorted(s for _, s, _ in runs)
    filled = starts[min(slots, n) - 1]
    steady = sum(filled < s <= drained for s in starts) / (drained - filled) if drained > filled else float("nan")
    cpu_s = scale_probe.cpu_delta(before, after)
    # The agent samples a run's resources 1 s after its start, then every 5 s (services/agent/resources.py).
    samples = sum(1 + int((e - s - 1) // 5) for _, s, e in runs if e - s >= 1) / n
    return {
        "slots": slots, "agents": len(sizes), "agent_slots": sizes, "trials": n, "sleep": [low, high],
        "load_1m": load, "boot_s": boot, "seconds": seconds,
        "trials_per_s": n / seconds, "steady_starts_per_s": steady, "offered_per_s": slots / mean_run,
        "busy_share": busy / (slots * seconds), "mean_run_s": mean_run,
        "gap_ms": {"p50": harness.percentile(gaps, 50) * 1000, "p99": harness.percentile(gaps, 99) * 1000,
                   "max": max(gaps) * 1000, "n": len(gaps)},
        "cpu_s": cpu_s, "cpu_ms_per_trial": {k: v / n * 1000 for k, v in cpu_s.items()},
        "cores": {k: v / seconds for k, v in cpu_s.items()},
        "idle_cores": idle, "busiest": busiest, "agents_ms_per_busy_slot_s": cpu_s["agents"] * 1000 / busy,
        "broker": mid["broker"], "tree_scan": mid["tree_scan"] | {"samples_per_trial": samples}, "load_1m_mid": mid["load_1m"], "memory_mid": mid["memory"], "memory_end": end_memory,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", default="100,250,500,1000", help="slot counts, comma-separated")
    ap.add_argument("--agent-slots", type=int, default=20, help="slots per agent")
    ap.add_argument("--rounds", type=int, default=20, help="trials per slot (20 at 1,000 slots: 20,000 trials)")
    ap.add_argument("--trials", type=int, help="trials per sweep at every size instead of --rounds x slots")
    ap.add_argument("--sleep", default="1-5", help="each trial sleeps a uniform draw from this range (seconds)")
    ap.add_argument("--concurrent", type=int, help="the spec's max_concurrent (default: 2 x slots)")
    ap.add_argument("--queue-window", type=int, help="the planner's SPOTSWEEP_QUEUE_WINDOW (default: its own)")
    ap.add_argument("--idle", type=float, default=5, help="seconds the idle stack's CPU is read, before each sweep")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--quick", action="store_true", help="a smoke size: 20 and 40 slots of 10, 2 rounds")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.slots, args.agent_slots, args.rounds = "20,40", 10, 2
    results = []
    with harness.services() as svc, harness.moto_s3() as s3, tempfile.TemporaryDirectory(prefix="bench-scale-") as t:
        for slots in (int(s) for s in args.slots.split(",")):
            print(f"{slots} slots ...", flush=True)
            results.append(measure(svc, s3, Path(t), slots, args))
            r = results[-1]
            print(f"  {r['steady_starts_per_s']:.1f} of {r['offered_per_s']:.0f} trials/s offered, gap p50 "
                  f"{r['gap_ms']['p50']:.1f} ms p99 {r['gap_ms']['p99']:.1f} ms, machine {r['cores']['machine']:.2f} "
                  f"cores (load {r['load_1m']:.1f})", flush=True)
    scale_report.show(results)
    path = harness.write_json("scale", {"args": vars(args) | {"json": str(args.json)}, "results": results,
                                        "growth": scale_report.growth(results)}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
