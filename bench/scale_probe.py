"""What the scale benchmark reads off a running cluster: CPU per part of the stack,
memory, RabbitMQ's connections and channels, and the slots' idle gaps.

* :func:`cpu` extends ``dispatch_cpu``'s per-process CPU (planner, collector,
  agents, the trials they reaped, RabbitMQ, all of PostgreSQL) with this run's
  own PostgreSQL backends (``pg_stat_activity`` of its database), moto's S3
  server, and the machine's busy CPU, so that what the stack does not account
  for (other sessions on this shared machine) shows as ``other``.
* :func:`memory` reads RSS and peak RSS (``VmHWM``) of the planner, the
  collector and every agent, and USS (memory no other process shares) of the
  agents: RSS counts the interpreter's shared pages once per agent.
* :func:`tree_scan` times what the agent's resource sample of a trial costs
  at the machine's process count (it reads every process on the node).
* :func:`broker_counts` asks ``rabbitmqctl`` for the vhost's connections and
  channels (the management API is not enabled on these machines).
* :func:`slot_gaps` rebuilds each agent's slots from its trials' own start and
  end stamps: the agent hands a run the slot freed first (``Slots`` is a FIFO
  queue), so each start takes the earliest end not yet followed; the gap is
  that start less that end.
"""

from __future__ import annotations

import heapq
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dispatch_cpu
import harness
import psutil
import psycopg


def _times(pids: Iterable[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass  # gone since it was listed
    return total


def backends(db_url: str) -> list[int]:
    """PostgreSQL backends connected to this run's database (the services' pools)."""
    name = db_url.rsplit("/", 1)[1]
    with psycopg.connect(harness.PG_ADMIN, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]


def moto_pid() -> int | None:
    """The moto S3 server that ``harness.moto_s3`` started under this process."""
    for p in psutil.Process().children():
        try:
            if "moto.server" in p.cmdline():
                return p.pid
        except psutil.Error:
            pass
    return None


def rabbit_server() -> int | None:
    """The broker's own Erlang VM: ``rabbitmqctl`` (here and in other sessions) starts short-lived ones too."""
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "beam.smp" and "rabbit" in (p.info["cmdline"] or []) and "boot" in (p.info["cmdline"] or []):
            return p.pid
    return None


def cpu(pids: dict[str, int], db_url: str) -> dict[str, float]:
    """Cumulative CPU seconds per part now; subtract two readings for a run's share."""
    out = dispatch_cpu._cpu(pids)
    broker = rabbit_server()
    out["rabbitmq"] = _times([broker]) if broker else out["rabbitmq"]
    for pid in backends(db_url):  # per backend: a pool's connections come and go between two readings
        out[f"pg:{pid}"] = _times([pid])
    moto = moto_pid()
    out["moto s3"] = _times([moto]) if moto else 0.0
    t = psutil.cpu_times()
    out["machine"] = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    return out


def processes() -> dict[int, tuple[str, float]]:
    """Every process's name and CPU seconds now: what ``other`` was, from two of these."""
    out = {}
    for p in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        t, name, argv = p.info["cpu_times"], p.info["name"] or "?", p.info["cmdline"] or []
        if name.startswith("python") and len(argv) > 1:  # which program: a script's name, or the module's
            name += " " + Path(argv[2] if argv[1] == "-m" and len(argv) > 2 else argv[1]).name
        if t is not None:
            out[p.pid] = (name, t.user + t.system)
    return out


def busiest(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], skip: Iterable[int],
            n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` process names (summed over their processes, ``skip`` left out) that used the most CPU between two readings."""
    left_out = set(skip)
    used: dict[str, float] = defaultdict(float)
    for pid, (name, t) in after.items():
        if pid not in left_out:
            used[name] += t - before.get(pid, (name, 0.0))[1]
    return sorted(used.items(), key=lambda kv: -kv[1])[:n]


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per part between two readings, ``other`` = the machine's less the stack's."""
    d = {k: after[k] - before.get(k, 0.0) for k in after if not k.startswith("pg:")}
    # This database's backends alive at the second reading: a new one's CPU all falls in between.
    d["postgres (this db)"] = sum(after[k] - before.get(k, 0.0) for k in after if k.startswith("pg:"))
    # "postgres (this db)" is inside "postgres" (every backend): not counted twice.
    ours = sum(v for k, v in d.items() if k not in ("machine", "postgres (this db)"))
    d["other"] = max(0.0, d["machine"] - ours)
    return d


def _status_kib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return 0.0


def memory(pids: dict[str, int]) -> dict[str, Any]:
    """MiB: planner's and collector's RSS and peak; the agents' RSS, peak and USS (mean, max, sum)."""
    out: dict[str, Any] = {}
    agents: dict[str, list[float]] = defaultdict(list)
    for name, pid in pids.items():
        p = psutil.Process(pid)
        rss, peak = p.memory_info().rss / 2**20, _status_kib(pid, "VmHWM") / 1024
        if name.startswith("agent"):
            agents["rss"].append(rss)
            agents["peak"].append(peak)
            agents["uss"].append(p.memory_full_info().uss / 2**20)
        else:
            out[name] = {"rss_mb": rss, "peak_mb": peak}
    out["agents"] = {k: {"mean": sum(v) / len(v), "max": max(v), "sum": sum(v)} for k, v in agents.items()}
    beam = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "beam.smp"]
    out["rabbitmq_node_rss_mb"] = sum(p.memory_info().rss for p in beam) / 2**20  # the whole broker, every vhost
    return out


def tree_scan() -> dict[str, float]:
    """What one of the agent's resource samples costs now: it lists the trial's process tree with
    psutil's ``children(recursive=True)``, which reads every process on the machine (``ppid_map``),
    so its cost grows with all the processes the node runs, here every slot's trial."""
    me = psutil.Process()
    start = time.process_time()
    for _ in range(5):
        me.children(recursive=True)
    return {"processes": len(psutil.pids()), "ms": (time.process_time() - start) / 5 * 1000}


def broker_counts(vhost: str) -> dict[str, int]:
    """The vhost's AMQP connections and channels, as RabbitMQ lists them (every vhost's:
    ``list_connections`` takes no ``-p``; other sessions share the broker, so filtered here)."""
    def count(what: str) -> int:
        done = subprocess.run(["rabbitmqctl", "-q", "--no-table-headers", what, "vhost"],
                              capture_output=True, text=True, timeout=120, check=True)
        return sum(1 for line in done.stdout.splitlines() if line.strip() == vhost)
    return {"connections": count("list_connections"), "channels": count("list_channels")}


def slot_gaps(runs: Iterable[tuple[str, float, float]], slots: dict[str, int]) -> tuple[list[float], float]:
    """Seconds each slot sat idle between a run's end and the next run's start on it,
    and when the first slot found no more work (its run's end that no start followed).

    ``runs``: (agent, start, end) per trial; ``slots``: each agent's slot count.
    A slot's first run (no end before it) and the ends no start followed (the
    sweep ran out) count no gap.
    """
    by_agent: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for agent, start, end in runs:
        by_agent[agent].append((start, end))
    gaps: list[float] = []
    drained = float("inf")
    for agent, spans in by_agent.items():
        spans.sort()
        free: list[float] = []  # ends of runs whose slot no later run took yet (a heap)
        for i, (start, end) in enumerate(spans):
            if i >= slots.get(agent, 0) and free:
                gaps.append(max(0.0, start - heapq.heappop(free)))  # stamps of two processes: never below 0
            heapq.heappush(free, end)
        drained = min(drained, free[0])
    return gaps, drained
