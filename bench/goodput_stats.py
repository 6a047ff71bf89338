"""The goodput benchmark's arithmetic: pure functions of a run's trace, journal and kills.

A *segment* is one run of one trial as its trace shows it (one process: the
step it started from, the last step it finished before the window closed). A
segment with a later segment of the same trial was interrupted; what it did
past the step its successor resumed from was done twice, so it is waste.

* spotsweep's useful steps: every step executed in the window, less that waste.
* A restart-from-scratch system (SkyPilot's default recovery, a W&B sweep's
  rerun) on the same slot timeline: every interrupted run's steps are lost,
  since in that system each run starts at step 0 and the run it replaces
  held no progress but its own. (A first-order replay: the same runs at the
  same times, only the starting step differs; its recovery is taken to be as
  fast as spotsweep's, which flatters it.)
* Per preemption, from the journal (``trial_events``): the runs the killed
  agent held at that moment, and for each the next ``trial.started`` of the
  same trial, on another agent: the recovery time; for a SIGTERM also the
  drain (the kill to the run's ``trial.finished``, outcome ``preempted``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Segment:
    k: int
    pid: int
    start_step: int
    start_t: float
    last_step: int
    last_t: float

    @property
    def executed(self) -> int:
        return self.last_step - self.start_step


@dataclass(frozen=True)
class Kill:
    """One preemption: when, which agent process, how (``sigterm`` or ``kill9``)."""

    at: float
    pid: int
    how: str


@dataclass
class Trace:
    segments: dict[int, list[Segment]] = field(default_factory=dict)  # by trial k, in start order
    mismatches: list[str] = field(default_factory=list)


def read_trace(lines: Iterable[str], t_end: float) -> Trace:
    """Segments of the runs that started by ``t_end``, with the steps done by then."""
    runs: dict[tuple[int, int], Segment] = {}
    out = Trace()
    for line in lines:
        f = line.split()
        if len(f) != 5:
            continue  # a line cut by a kill -9 mid-write (never seen: one write per line)
        k, pid, what = int(f[0]), int(f[1]), f[2]
        if what == "mismatch":
            out.mismatches.append(f"trial k={k} pid {pid}: resume_step {f[3]}, state step {f[4]}")
        elif what == "start" and float(f[4]) <= t_end:
            runs[(k, pid)] = Segment(k, pid, int(f[3]), float(f[4]), int(f[3]), float(f[4]))
        elif what == "step" and float(f[4]) <= t_end and (k, pid) in runs:
            seg = runs[(k, pid)]
            seg.last_step, seg.last_t = max(seg.last_step, int(f[3])), float(f[4])
    for seg in sorted(runs.values(), key=lambda s: s.start_t):
        out.segments.setdefault(seg.k, []).append(seg)
    return out


def successor(trace: Trace, seg: Segment) -> Segment | None:
    segs = trace.segments[seg.k]
    i = segs.index(seg)
    return segs[i + 1] if i + 1 < len(segs) else None


def useful_steps(trace: Trace) -> dict[str, int]:
    """Steps executed, spotsweep's useful steps and a restart-from-scratch system's."""
    executed = redone = scratch_lost = 0
    for segs in trace.segments.values():
        for seg, nxt in zip(segs, [*segs[1:], None]):
            executed += seg.executed
            if nxt is not None:
                redone += max(0, seg.last_step - nxt.start_step)
                scratch_lost += seg.executed
    return {"executed": executed, "useful": executed - redone, "scratch_useful": executed - scratch_lost}


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pid(agent: str) -> int:
    tail = agent.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def preemptions(kills: Sequence[Kill], events: Sequence[dict[str, Any]], k_of: dict[str, int], trace: Trace,
                ckpt_every: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Per interrupted run: recovery seconds and steps lost (spotsweep's and a
    restart-from-scratch system's); and what looks like a bug (a resume at step 0
    after a committed checkpoint, a kill -9 that lost more than two intervals)."""
    starts = sorted((e for e in events if e["kind"] == "trial.started"), key=lambda e: _ts(e["body"]["time"]))
    ends = {(e["body"].get("run_id"), e["trial_id"]): _ts(e["body"]["time"])
            for e in events if e["kind"] in ("trial.finished", "trial.lost")}
    ckpts = [(e["trial_id"], int(e["body"]["step"]), _ts(e["body"]["time"])) for e in events
             if e["kind"] == "trial.checkpoint"]
    rows: list[dict[str, Any]] = []
    bugs: list[str] = []
    for kill in kills:
        held = [s for s in starts if _pid(s["body"]["agent"]) == kill.pid and _ts(s["body"]["time"]) < kill.at
                and ends.get((s["body"].get("run_id"), s["trial_id"]), float("inf")) >= kill.at]
        for s in held:
            tid = s["trial_id"]
            nxt = next((n for n in starts if n["trial_id"] == tid and _ts(n["body"]["time"]) > kill.at), None)
            end = ends.get((s["body"].get("run_id"), tid))
            row: dict[str, Any] = {"how": kill.how, "trial": tid, "at": kill.at,
                                   "recovery_s": _ts(nxt["body"]["time"]) - kill.at if nxt else None,
                                   "drain_s": end - kill.at if kill.how == "sigterm" and end is not None else None,
                                   "resume_step": nxt["body"].get("resume_step") if nxt else None}
            k = k_of.get(tid)
            segs = [g for g in trace.segments.get(k, []) if g.start_t < kill.at] if k is not None else []
            after = successor(trace, segs[-1]) if segs else None
            if segs and after is not None:
                seg = segs[-1]
                row |= {"reached": seg.last_step, "lost": max(0, seg.last_step - after.start_step),
                        "scratch_lost": seg.executed, "resumed_at": after.start_step}
                saved = [st for t, st, at in ckpts if t == tid and at < kill.at and st > 0]
                if after.start_step == 0 and saved:
                    bugs.append(f"{tid} restarted at step 0 after its checkpoint at step {max(saved)} ({kill.how})")
                if kill.how == "kill9" and row["lost"] > 2 * ckpt_every:
                    bugs.append(f"{tid} lost {row['lost']} steps to a kill -9 with a checkpoint every {ckpt_every}")
            rows.append(row)
    return rows, bugs


def slot_seconds(lives: Iterable[tuple[float | None, float | None]], slots: int, t0: float, t_end: float) -> float:
    """Slot time the pool had in [t0, t_end]: each agent from ready to gone (killed,
    or drained and exited), times its slots. A replacement's boot is not counted:
    the node does not exist yet (its wait shows in the recovery time instead)."""
    total = 0.0
    for ready, gone in lives:
        if ready is None:
            continue
        total += max(0.0, min(gone if gone is not None else t_end, t_end) - max(ready, t0))
    return total * slots
