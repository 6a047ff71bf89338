"""The goodput benchmark's summary and tables: pure functions of its runs.

Per checkpoint interval it pairs the clean run with the faulted one. Besides the
measured ratio it projects the faulted run to real time: each preemption cost
``L`` slot-seconds (the clean run's goodput times the faulted run's slot time,
less its useful steps, in seconds of clean work, per preemption). Of that, the
steps lost scale with the time unit (a step here is ``60 / minute_s`` times
shorter than at real scale) and the rest (drain, requeue, dispatch, restore,
process start) does not, so at real scale a preemption every ``preempt_every``
minutes costs ``(L_steps * 60 / minute_s + L_fixed) / (preempt_every * 60 * slots)``
(and a restart-from-scratch system the same with its own lost steps).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import harness


def run_line(r: dict[str, Any]) -> str:
    kind = "faulted" if r["faulted"] else "clean"
    return (f"run {r['run']}: {kind}, checkpoint every {r['interval_min']:g} min ({r['ckpt_every']} steps): "
            f"{r['useful']} useful of {r['executed']} steps in {r['slot_seconds']:.1f} slot-s = {r['goodput']:.2f} steps/slot-s, "
            f"{r['kills']} preemptions, load {r['load_1m']}")


def _pcts(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(values), "p50": harness.percentile(values, 50), "p99": harness.percentile(values, 99),
            "max": max(values)}


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def by_how(rows: list[dict[str, Any]], how: str | None) -> dict[str, Any]:
    """Recovery seconds and steps lost of the interrupted runs, of one kind of preemption or all."""
    pick = [r for r in rows if how is None or r["how"] == how]
    return {"recovery_s": _pcts([r["recovery_s"] for r in pick if r["recovery_s"] is not None]),
            "drain_s": _pcts([r["drain_s"] for r in pick if r.get("drain_s") is not None]),
            "not_back": sum(r["recovery_s"] is None for r in pick),
            "lost_mean": _mean([r["lost"] for r in pick if "lost" in r]),
            "lost_max": max((r["lost"] for r in pick if "lost" in r), default=None),
            "scratch_lost_mean": _mean([r["scratch_lost"] for r in pick if "scratch_lost" in r])}


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"ideal_goodput": 1 / args.step_s, "intervals": []}
    for interval in args.intervals:
        clean = next(r for r in runs if r["interval_min"] == interval and not r["faulted"])
        fault = next(r for r in runs if r["interval_min"] == interval and r["faulted"])
        rows = fault["preemptions"]
        g = clean["goodput"]
        n = max(1, fault["kills"])
        cost = (g * fault["slot_seconds"] - fault["useful"]) / g / n  # slot-seconds per preemption
        cost_steps = sum(r.get("lost", 0) for r in rows) * args.step_s / n
        scale = 60.0 / args.minute_s
        budget = args.preempt_every * 60 * args.slots  # slot-seconds between two preemptions of an agent
        projected = 1 - (cost_steps * scale + (cost - cost_steps)) / budget
        scratch_steps = sum(r.get("scratch_lost", 0) for r in rows) * args.step_s / n
        scratch_projected = 1 - (scratch_steps * scale + (cost - cost_steps)) / budget
        out["intervals"].append({
            "interval_min": interval, "ckpt_every": fault["ckpt_every"], "clean_goodput": g,
            "faulted_goodput": fault["goodput"], "ratio": fault["goodput"] / g,
            "scratch_ratio": fault["scratch_goodput"] / g, "kills": fault["kills"], "interrupted": len(rows),
            "cost_slot_s": cost, "cost_steps_slot_s": cost_steps, "projected_ratio": projected,
            "scratch_projected_ratio": scratch_projected,
            "sigterm": by_how(rows, "sigterm"), "kill9": by_how(rows, "kill9"), "all": by_how(rows, None)})
    every = [r for run in runs if run["faulted"] for r in run["preemptions"]]
    boots = [b for run in runs if run["faulted"] for b in run["boot_s"] if b is not None]
    out["replacement_ready_s"] = _pcts(boots)
    out["pooled"] = {"sigterm": by_how(every, "sigterm"), "kill9": by_how(every, "kill9"), "all": by_how(every, None)}
    return out


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def tables(s: dict[str, Any], args: argparse.Namespace) -> str:
    head = (f"goodput under preemption: 1 min = {args.minute_s:g} s, step {args.step_s:g} s, a preemption per agent "
            f"per {args.preempt_every:g} min on average ({args.kill9_share:.0%} kill -9), {args.agents} agents x "
            f"{args.slots} slot(s), {args.window:g} s windows; ideal {s['ideal_goodput']:.1f} steps/slot-s")
    rows = [[f"{i['interval_min']:g} min ({i['ckpt_every']} steps)", i["kills"], i["interrupted"],
             _f(i["clean_goodput"]), _f(i["faulted_goodput"]), f"{i['ratio']:.1%}", f"{i['scratch_ratio']:.1%}",
             _f(i["sigterm"]["recovery_s"]["p50"]), _f(i["kill9"]["recovery_s"]["p50"]),
             _f(i["all"]["recovery_s"]["p99"]), _f(i["sigterm"]["lost_mean"], ".1f"), _f(i["kill9"]["lost_mean"], ".1f"),
             _f(i["all"]["scratch_lost_mean"], ".1f"), _f(i["cost_slot_s"]), f"{i['projected_ratio']:.1%}",
             f"{i['scratch_projected_ratio']:.1%}"]
            for i in s["intervals"]]
    first = harness.table(head, ["checkpoint", "preempt", "runs hit", "clean g", "faulted g", "faulted/clean",
                                 "scratch/clean", "rec p50 TERM s", "rec p50 -9 s", "rec p99 s", "lost TERM",
                                 "lost -9", "lost scratch", "cost slot-s", "projected", "scratch proj."], rows)
    p = s["pooled"]
    pooled = harness.table("every faulted run pooled: recovery (kill -> trial.started elsewhere) and steps lost per run hit",
                           ["preemption", "n", "rec p50 s", "rec p99 s", "rec max s", "not back", "drain p50 s",
                            "lost mean", "lost max", "scratch lost mean"],
                           [[how, p[how]["recovery_s"]["n"], _f(p[how]["recovery_s"]["p50"]),
                             _f(p[how]["recovery_s"]["p99"]), _f(p[how]["recovery_s"]["max"]), p[how]["not_back"],
                             _f(p[how]["drain_s"]["p50"]),
                             _f(p[how]["lost_mean"], ".1f"), _f(p[how]["lost_max"], "d"), _f(p[how]["scratch_lost_mean"], ".1f")]
                            for how in ("sigterm", "kill9", "all")])
    b = s["replacement_ready_s"]
    boot = (f"a replacement agent was ready {_f(b['p50'])} s (p50), {_f(b['p99'])} s (p99) after the kill "
            f"(n={b['n']}): with every other slot busy, a trial cannot run again sooner")
    return first + "\n\n" + pooled + "\n" + boot
