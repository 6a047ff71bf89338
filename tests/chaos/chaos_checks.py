"""What the chaos run must find in the results database afterwards.

Every check reads the public views (``trial_results``, ``metric_points``)
and the collector's event log (``trial_events``), and compares with values
computed from the deterministic trial (chaos_trial.expected).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import psycopg
from chaos_trial import expected


@dataclass(frozen=True)
class Finding:
    check: str
    expected: str
    found: str
    ok: bool


def _rows(url: str, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def check(url: str, sweep_id: str, trials: int, steps: int, ckpt_every: int, rabbit: Any, preempts: int = 0,
          drained: dict[str, int | None] | None = None) -> list[Finding]:
    """Every finding; ``preempts`` graceful preemptions were injected, and the
    agents they hit ended with the exit codes in ``drained``."""
    out: list[Finding] = []
    add = lambda name, want, got, ok: out.append(Finding(name, str(want), str(got), bool(ok)))  # noqa: E731

    state = _rows(url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,))
    add("sweep state", "completed", state[0][0] if state else "missing", state and state[0][0] == "completed")

    results = _rows(url, "SELECT (params->>'k')::int, state, (metrics->>'loss')::float8, attempts, preemptions, losses,"
                         " error FROM trial_results WHERE sweep_id = %s", (sweep_id,))
    completed = [r for r in results if r[1] == "completed"]
    add("trials completed", trials, len(completed), len(completed) == trials == len(results))
    exact = [r for r in completed if r[2] == expected(r[0], steps)[-1]]
    add("exact final metric", trials, len(exact), len(exact) == trials)
    add("attempts (lost runs)", "-", f"{sum(r[3] for r in results)} ({sum(r[5] for r in results)})", True)
    # A preempted agent that held trials must report them preempted (not let
    # them come back as losses) and leave with 0: the graceful path ran.
    preempted = sum(r[4] for r in results)
    add("preemptions counted", ">= 1" if preempts else "-", preempted, preempted >= 1 or not preempts)
    drained = drained or {}
    add("drained agents exited 0", f"0 for all {len(drained)}", ", ".join(f"{n}: {c}" for n, c in drained.items()) or "-",
        all(c == 0 for c in drained.values()))

    done = _rows(url, "SELECT trial_id, count(*) FROM trial_events WHERE sweep_id = %s AND kind = 'trial.finished'"
                      " AND body->>'outcome' = 'completed' GROUP BY trial_id", (sweep_id,))
    twice = [t for t, n in done if n != 1]
    add("trials completed exactly once", "0 twice", f"{len(twice)} twice", not twice and len(done) == trials)

    out.extend(_resumes(url, sweep_id, ckpt_every))
    out.extend(_points(url, sweep_id, trials, steps))

    dead = rabbit.ctl("list_queues", "-p", "/", "name", "messages")
    count = sum(int(line.split()[1]) for line in dead.stdout.splitlines() if line.startswith("spotsweep.dead"))
    add("dead-lettered messages", 0, count, count == 0)
    return out


def _resumes(url: str, sweep_id: str, ckpt_every: int) -> list[Finding]:
    # A start's time is the agent's (the envelope's), not when the planner journaled it: a planner
    # that lags (killed, or PostgreSQL down) would journal it after the collector stored the new
    # run's own points, which would then count as redone.
    starts = _rows(url, "SELECT trial_id, (body->>'resume_step')::bigint, (body->>'time')::timestamptz, attempt"
                        " FROM trial_events WHERE sweep_id = %s AND kind = 'trial.started' ORDER BY recorded_at",
                   (sweep_id,))
    ckpts = _rows(url, "SELECT trial_id, (body->>'time')::timestamptz FROM trial_events"
                       " WHERE sweep_id = %s AND kind = 'trial.checkpoint'", (sweep_id,))
    points = _rows(url, "SELECT trial_id, step, recorded_at, attempt FROM metric_points"
                        " WHERE sweep_id = %s AND name = 'loss'", (sweep_id,))
    first_ckpt: dict[str, Any] = {}
    for trial, at in ckpts:
        first_ckpt[trial] = min(at, first_ckpt.get(trial, at))
    by_trial: dict[str, list[tuple[Any, Any, Any]]] = defaultdict(list)
    for trial, resume, at, attempt in starts:
        by_trial[trial].append((resume, at, attempt))
    again = from_zero = 0
    lost: list[int] = []
    for trial, runs in by_trial.items():
        for resume, at, attempt in runs[1:]:  # every run after the first followed an interruption
            again += 1
            if resume is None and trial in first_ckpt and first_ckpt[trial] < at:
                from_zero += 1
            if resume is not None:
                # Earlier attempts' points all came before this run; of its own attempt's
                # (a run redelivered after its agent died), those stored before it started.
                before = [s for t, s, p_at, p_attempt in points
                          if t == trial and (p_attempt < attempt or (p_attempt == attempt and p_at < at))]
                lost.append(max(0, max(before, default=resume) - resume))
    return [
        Finding("runs after an interruption", "-", str(again), True),
        Finding("restarted from step 0 despite a checkpoint", "0", str(from_zero), from_zero == 0),
        Finding("steps redone per resume (max / mean)", f"<= {3 * ckpt_every}",
                f"{max(lost, default=0)} / {sum(lost) / max(1, len(lost)):.1f}", max(lost, default=0) <= 3 * ckpt_every),
    ]


def _points(url: str, sweep_id: str, trials: int, steps: int) -> list[Finding]:
    rows = _rows(url, "SELECT trial_id, attempt, step, value FROM metric_points WHERE sweep_id = %s AND name = 'loss'",
                 (sweep_id,))
    keys = _rows(url, "SELECT count(*), count(DISTINCT (trial_id, attempt, step, name)) FROM metric_points"
                      " WHERE sweep_id = %s", (sweep_id,))[0]
    k_of = {t: int(k) for t, k in _rows(url, "SELECT trial_id, params->>'k' FROM trials WHERE sweep_id = %s", (sweep_id,))}
    seen: dict[tuple[str, int], set[float]] = defaultdict(set)
    for trial, _attempt, step, value in rows:
        seen[(trial, step)].add(value)
    missing = wrong = 0
    for trial, k in k_of.items():
        want = expected(k, steps)
        for step in range(1, steps + 1):
            values = seen.get((trial, step))
            if not values:
                missing += 1
            elif values != {want[step - 1]}:
                wrong += 1
    return [
        Finding("points stored", f">= {trials * steps} (every step of every trial)", str(len(rows)), len(rows) >= trials * steps),
        Finding("steps with no point (lost)", "0", str(missing), missing == 0),
        Finding("points with a wrong value", "0", str(wrong), wrong == 0),
        Finding("points stored twice", "0", str(keys[0] - keys[1]), keys[0] == keys[1]),
    ]
