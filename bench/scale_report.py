"""The scale benchmark's tables: one column per slot count, so a figure's growth
from the smallest size to the largest reads along its row; then the growth
ratios and where the machine ran out first.

A size *keeps up* when it starts at least 90% of the trials a second its slots
ask for (steady state: slots / the runs' mean length) and its gap p99 is under the 100 ms target; at the first size that does not, the
part using the most CPU is named, and the planner or collector is named as the
limit when it used most of one core (each is one Python process: one core at
most, whatever the machine has).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import harness

PARTS = ["planner", "collector", "agents", "trial processes", "rabbitmq", "postgres", "postgres (this db)", "moto s3",
         "other", "machine"]
STACK = ["planner", "collector", "agents", "rabbitmq", "postgres (this db)", "moto s3"]  # this run's own processes
TARGET_GAP_P99_MS = 100.0
KEEPS_UP = 0.9  # achieved / offered trials/s
ONE_CORE = 0.85  # a single-threaded service at this share of a core is the limit


def _rows(results: Sequence[dict[str, Any]], spec: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]]) -> list[list[Any]]:
    return [[label, *(get(r) for r in results)] for label, get in spec]


def _per_part(results: Sequence[dict[str, Any]], key: str) -> list[list[Any]]:
    return [[p, *(r[key].get(p, 0.0) for r in results)] for p in PARTS]


def _mem(r: dict[str, Any], name: str, key: str) -> float:
    return float(r["memory_end"][name][key])


def show(results: Sequence[dict[str, Any]]) -> None:
    header = ["slots", *(str(r["slots"]) for r in results)]
    summary = [
        ("agents", lambda r: r["agents"]), ("trials", lambda r: r["trials"]),
        ("load 1m at start, mid-run", lambda r: f"{r['load_1m']:.1f}, {r['load_1m_mid']:.1f}"), ("agents boot s", lambda r: r["boot_s"]),
        ("trials/s offered", lambda r: r["offered_per_s"]), ("starts/s, steady state", lambda r: r["steady_starts_per_s"]),
        ("trials/s, whole sweep", lambda r: r["trials_per_s"]),
        ("slots busy share", lambda r: f"{r['busy_share']:.0%}"),
        ("gap p50 ms", lambda r: r["gap_ms"]["p50"]), ("gap p99 ms", lambda r: r["gap_ms"]["p99"]),
        ("gap max ms", lambda r: r["gap_ms"]["max"]),
    ]
    print(harness.table(f"scale: trials sleep {results[0]['sleep'][0]:g}-{results[0]['sleep'][1]:g} s; gap target p99 "
                        f"< {TARGET_GAP_P99_MS:.0f} ms", header, _rows(results, summary)))
    print()
    print(harness.table("CPU ms per trial", header, _per_part(results, "cpu_ms_per_trial")))
    print()
    print(harness.table("cores used (CPU seconds / sweep seconds; 2 on this machine)", header,
                        _per_part(results, "cores")))
    print()
    memory = [
        ("planner RSS MiB (peak)", lambda r: f"{_mem(r, 'planner', 'rss_mb'):.0f} ({_mem(r, 'planner', 'peak_mb'):.0f})"),
        ("collector RSS MiB (peak)",
         lambda r: f"{_mem(r, 'collector', 'rss_mb'):.0f} ({_mem(r, 'collector', 'peak_mb'):.0f})"),
        ("agent RSS MiB mid-run (max)", lambda r: f"{r['memory_mid']['agents']['rss']['mean']:.0f} "
                                                  f"({r['memory_mid']['agents']['rss']['max']:.0f})"),
        ("agent USS MiB mid-run", lambda r: r["memory_mid"]["agents"]["uss"]["mean"]),
        ("agents' RSS MiB, all", lambda r: r["memory_mid"]["agents"]["rss"]["sum"]),
        ("RabbitMQ connections", lambda r: r["broker"]["connections"]),
        ("RabbitMQ channels", lambda r: r["broker"]["channels"]),
        ("RabbitMQ node RSS MiB", lambda r: r["memory_mid"]["rabbitmq_node_rss_mb"]),
    ]
    print(harness.table("memory (MiB) and broker (mid-run)", header, _rows(results, memory)))
    print()
    agents = [
        ("agents' CPU ms per trial", lambda r: r["cpu_ms_per_trial"]["agents"]),
        ("agent CPU ms per busy slot-second", lambda r: r["agents_ms_per_busy_slot_s"]),
        ("processes on the machine, mid-run", lambda r: r["tree_scan"]["processes"]),
        ("one resource sample's tree scan, ms", lambda r: r["tree_scan"]["ms"]),
        ("  x samples per trial = ms per trial",
         lambda r: f"{r['tree_scan']['samples_per_trial']:.2f} x = {r['tree_scan']['samples_per_trial'] * r['tree_scan']['ms']:.1f}"),
        ("agents' cores, every slot idle", lambda r: r["idle_cores"]["agents"]),
        ("stack's cores, every slot idle", lambda r: sum(v for k, v in r["idle_cores"].items() if k in STACK)),
    ]
    print(harness.table("what agents cost", header, _rows(results, agents)))
    print()
    for r in results:
        print(f"{r['slots']} slots, busiest processes besides planner, collector, agents (CPU s): during the sweep "
              f"{', '.join(f'{n} {t:.0f}' for n, t in r['busiest'])}; idle before it "
              f"{', '.join(f'{n} {t:.1f}' for n, t in r['idle_cores']['busiest'])}")
    print()
    for key, value in growth(results).items():
        print(f"{key}: {value}")


def growth(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Largest size against smallest for each figure the issue asks about, and the first size that did not keep up."""
    a, b = results[0], results[-1]

    def ratio(get: Callable[[dict[str, Any]], float]) -> str:
        return f"{get(a):.3g} -> {get(b):.3g} ({get(b) / get(a):.2f}x)" if get(a) else f"{get(a)} -> {get(b)}"

    out: dict[str, Any] = {f"growth {a['slots']} -> {b['slots']} slots": "", **{
        f"  {label}": ratio(get) for label, get in [
            ("planner CPU ms/trial", lambda r: r["cpu_ms_per_trial"]["planner"]),
            ("collector CPU ms/trial", lambda r: r["cpu_ms_per_trial"]["collector"]),
            ("agents CPU ms/trial", lambda r: r["cpu_ms_per_trial"]["agents"]),
            ("rabbitmq CPU ms/trial", lambda r: r["cpu_ms_per_trial"]["rabbitmq"]),
            ("planner peak RSS MiB", lambda r: _mem(r, "planner", "peak_mb")),
            ("collector peak RSS MiB", lambda r: _mem(r, "collector", "peak_mb")),
            ("RabbitMQ connections", lambda r: r["broker"]["connections"]),
            ("RabbitMQ channels", lambda r: r["broker"]["channels"]),
            ("gap p99 ms", lambda r: r["gap_ms"]["p99"]),
        ]}}
    out["runs out"] = runs_out(results)
    return out


def runs_out(results: Sequence[dict[str, Any]]) -> str:
    """The first size that did not keep up, and the part that limited it."""
    for r in results:
        kept = r["steady_starts_per_s"] >= KEEPS_UP * r["offered_per_s"]
        if kept and r["gap_ms"]["p99"] < TARGET_GAP_P99_MS:
            continue
        cores = {p: r["cores"].get(p, 0.0) for p in PARTS if p not in ("machine", "postgres (this db)")}
        top = sorted(cores.items(), key=lambda kv: -kv[1])[:3]
        single = [p for p in ("planner", "collector") if cores[p] >= ONE_CORE]
        why = (f"{' and '.join(single)} at {', '.join(f'{cores[p]:.2f}' for p in single)} of one core (one process)"
               if single else f"machine at {r['cores']['machine']:.2f} cores")
        return (f"{r['slots']} slots: {r['steady_starts_per_s']:.0f} of {r['offered_per_s']:.0f} trials/s offered, gap p99 "
                f"{r['gap_ms']['p99']:.0f} ms; {why}; most CPU: {', '.join(f'{p} {c:.2f}' for p, c in top)} cores")
    return f"every size kept up (>= {KEEPS_UP:.0%} of the offered rate, gap p99 < {TARGET_GAP_P99_MS:.0f} ms)"
