"""The dashboard's reads: set-based queries over the public views only, each
answering one question in one or two round trips whatever the number of
trials (docs/dashboard.md, "Speed"); curves walk the points' primary key,
never the whole sweep's points.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from spotsweep.shared.db import Conn

STATES = ("pending", "queued", "running", "completed", "pruned", "failed", "cancelled")
_SWEEP = ("SELECT sweep_id, name, state, error, note, created_at, finished_at, spec, metric, mode, repeats, gpus, best,"
          f" gpu_hours, cost, on_demand_cost, {', '.join(STATES)} FROM sweep_results")


def _counted(row: dict[str, Any]) -> dict[str, Any]:
    """A ``sweep_results`` row with ``counts``: trials per state, the states with none left out."""
    return {**row, "counts": {state: row[state] for state in STATES if row.get(state)}}


def sweeps(conn: Conn) -> list[dict[str, Any]]:
    """Every sweep, newest first, with trials per state (``counts``, not
    smoke ones) and the best final objective of its completed trials
    (finite values only), as ``sweep_results`` has them."""
    rows = conn.execute(_SWEEP.replace(" spec,", " jsonb_build_object('resources', spec->'resources') AS spec,")
                        + " ORDER BY created_at DESC, sweep_id").fetchall()  # the spec's resources: a CPU sweep's unit
    return [_counted(r) for r in rows]


def sweep(conn: Conn, sweep_id: str) -> dict[str, Any] | None:
    """One sweep's header (with its spec and ``counts``), or None when there is no such sweep."""
    row = conn.execute(_SWEEP + " WHERE sweep_id = %s", (sweep_id,)).fetchone()
    return None if row is None else _counted(row)


def find_sweep(conn: Conn, id_or_name: str) -> dict[str, Any] | None:
    """A sweep's header by its id or, failing that, the newest sweep with that name."""
    if (found := sweep(conn, id_or_name)) is not None:
        return found
    row = conn.execute(_SWEEP + " WHERE name = %s ORDER BY created_at DESC, sweep_id DESC LIMIT 1", (id_or_name,)).fetchone()
    return None if row is None else _counted(row)


# What the trial list shows (present.trial_json): not the error text or the rungs, which only a trial's page needs.
_LISTED = ("trial_id, trial_name, state, params, metrics, attempts, preemptions, failures, flags, warnings, smoke, agent,"
           " run_seconds, started_at, finished_at")


def trials(conn: Conn, sweep_id: str, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every trial of a sweep (or those of ``only``) as ``trial_results`` has
    it (``flags`` and ``warnings`` when the view has them), by start."""
    where = " AND trial_id = ANY(%s)" if only is not None else ""
    args = (sweep_id, only) if only is not None else (sweep_id,)
    return conn.execute(f"SELECT {_LISTED} FROM trial_results WHERE sweep_id = %s{where} ORDER BY smoke DESC,"
                        " started_at NULLS LAST, trial_id", args).fetchall()


# A running trial's latest value of each metric (not the agent's sys/ samples): its newest attempt's highest step.
LATEST = ("SELECT jsonb_object_agg(l.name, l.value) FROM (SELECT DISTINCT ON (p.name) p.name, p.value FROM metric_points p"
          " WHERE p.trial_id = trial_results.trial_id AND NOT starts_with(p.name, 'sys/')"
          " ORDER BY p.name, p.attempt DESC, p.step DESC) l")


def latest(conn: Conn, trial_id: str) -> dict[str, Any]:
    """A trial's latest value of each metric, as :data:`LATEST` takes them."""
    row = conn.execute(f"SELECT ({LATEST}) AS latest FROM trial_results WHERE trial_id = %s", (trial_id,)).fetchone()
    return (row or {}).get("latest") or {}


def listed_json(conn: Conn, sweep_id: str, metric: str) -> list[dict[str, Any]]:
    """Every trial of a sweep as the trial list's JSON object built by PostgreSQL
    (``body``: text, ``rank`` still to add), with what ranking needs (``objective``:
    jsonb keeps NaN and infinities as strings). Nothing is parsed in Python:
    10,000 trials cost a third of what building them here did."""
    return conn.execute(
        "SELECT json_build_object(" + "".join(f"'{c}', {c}, " for c in _LISTED.split(", "))
        + "'latest', CASE WHEN state = 'running' THEN (" + LATEST + ") END)::text AS body,"
        " state, trial_id, smoke,"
        " CASE WHEN jsonb_typeof(metrics->%s) = 'number' THEN (metrics->>%s)::float END AS objective"
        " FROM trial_results WHERE sweep_id = %s", (metric, metric, sweep_id)).fetchall()


def ranking(conn: Conn, sweep_id: str, metric: str) -> list[dict[str, Any]]:
    """What ranking needs of every trial (not smoke ones): id, name, state, the metric."""
    return conn.execute(
        "SELECT trial_id, trial_name, state, jsonb_build_object(%s::text, metrics->%s) AS metrics FROM trial_results"
        " WHERE sweep_id = %s AND NOT smoke", (metric, metric, sweep_id)).fetchall()


def trial(conn: Conn, sweep_id: str, trial_id: str) -> dict[str, Any] | None:
    return conn.execute("SELECT * FROM trial_results WHERE sweep_id = %s AND trial_id = %s", (sweep_id, trial_id)).fetchone()


def metric_names(conn: Conn, sweep_id: str, sample: list[str]) -> list[str]:
    """Metric names: the sweep's final metrics, and what a few trials
    (``sample``: running ones have no final metrics yet) reported."""
    rows = conn.execute(
        "SELECT DISTINCT jsonb_object_keys(metrics) AS name FROM trial_results WHERE sweep_id = %s"
        " UNION SELECT DISTINCT name FROM metric_points WHERE trial_id = ANY(%s)",
        (sweep_id, sample),
    ).fetchall()
    return sorted(r["name"] for r in rows)


def curves(conn: Conn, trial_ids: list[str], metric: str) -> dict[str, list[tuple[int, float, int, datetime]]]:
    """Each trial's curve of ``metric`` as (step, value, attempt, recorded_at), by
    step; a step reported by several attempts keeps the latest one's value (as
    ``metric_points``' documented example merges attempts)."""
    rows = conn.execute(
        "SELECT DISTINCT ON (trial_id, step) trial_id, step, value, attempt, recorded_at FROM metric_points"
        " WHERE trial_id = ANY(%s) AND name = %s ORDER BY trial_id, step, attempt DESC",
        (trial_ids, metric),
    ).fetchall()
    out: dict[str, list[tuple[int, float, int, datetime]]] = {t: [] for t in trial_ids}
    for r in rows:
        out[r["trial_id"]].append((r["step"], r["value"], r["attempt"], r["recorded_at"]))
    return out


def starts(conn: Conn, trial_ids: list[str]) -> dict[str, datetime | None]:
    """When each trial first started (its curves' time axis starts there)."""
    rows = conn.execute("SELECT trial_id, started_at FROM trial_results WHERE trial_id = ANY(%s)", (trial_ids,)).fetchall()
    return {r["trial_id"]: r["started_at"] for r in rows}


def best_so_far(conn: Conn, sweep_id: str, metric: str, mode: str) -> list[dict[str, Any]]:
    """The running best of the objective over finished trials by finish
    time: only the trials that improved it (a window function), each with
    ``run_s``, the running seconds of every trial (any state) finished by
    then, for best-so-far against GPU-hours."""
    best = "min" if mode == "min" else "max"
    return conn.execute(
        "SELECT finished_at, trial_id, trial_name, value, run_s FROM ("
        f"  SELECT finished_at, trial_id, trial_name, value, {best}(value) OVER w AS best, sum(run_seconds) OVER w AS run_s"
        "   FROM (SELECT finished_at, trial_id, trial_name, run_seconds,"
        "                CASE WHEN state = 'completed' AND jsonb_typeof(metrics->%s) = 'number'"
        "                     THEN (metrics->>%s)::float END AS value FROM trial_results"
        "         WHERE sweep_id = %s AND NOT smoke AND finished_at IS NOT NULL) f"
        "   WINDOW w AS (ORDER BY finished_at, trial_id)"
        ") w WHERE value = best ORDER BY finished_at, trial_id",
        (metric, metric, sweep_id),
    ).fetchall()


def spending(conn: Conn, sweep_id: str) -> tuple[float, list[dict[str, Any]]]:
    """The running seconds of every trial of a sweep (smoke ones too: they
    were paid for), and those of finished trials by finish time."""
    total = conn.execute("SELECT coalesce(sum(run_seconds), 0) AS s FROM trial_results WHERE sweep_id = %s",
                         (sweep_id,)).fetchone()
    rows = conn.execute("SELECT finished_at, run_seconds FROM trial_results WHERE sweep_id = %s AND finished_at IS NOT NULL"
                        " ORDER BY finished_at, trial_id", (sweep_id,)).fetchall()
    return float(total["s"] if total else 0.0), rows


def seed_groups(conn: Conn, sweep_id: str, metric: str) -> list[dict[str, Any]]:
    """A sweep's trials (not smoke ones) grouped by config in SQL, so no params
    are parsed but the few configs shown: ``config`` is the params less ``seed``
    as jsonb's text (``1``, ``1.0`` and ``true`` stay apart, as the report keeps them)."""
    return conn.execute(
        "SELECT config, count(*) AS runs, array_agg(trial_id ORDER BY seed, trial_id) AS trial_ids,"
        " array_agg(value ORDER BY seed, trial_id) FILTER (WHERE value IS NOT NULL) AS values,"
        " array_agg(seed ORDER BY seed, trial_id) FILTER (WHERE value IS NOT NULL) AS seeds FROM ("
        "  SELECT (params - 'seed')::text AS config, params->'seed' AS seed, trial_id,"
        "         CASE WHEN state <> 'completed' THEN NULL"
        "              WHEN jsonb_typeof(metrics->%s) = 'number' THEN (metrics->>%s)::float"
        "              WHEN metrics->>%s IN ('NaN', 'Infinity', '-Infinity', 'nan', 'inf', '-inf')"
        "                THEN (metrics->>%s)::float END AS value"
        "  FROM trial_results WHERE sweep_id = %s AND NOT smoke) t GROUP BY config",
        (metric, metric, metric, metric, sweep_id),
    ).fetchall()


def runs(conn: Conn, sweep_id: str, trial_id: str | None = None) -> list[dict[str, Any]]:
    """Each run's start and end events of a sweep's trials (the view
    ``run_events``: the planner journals every start, end and loss it
    decides), with the trial's name, state and end (a run with no end of an
    ended trial did not end well)."""
    return conn.execute(
        "SELECT e.kind, e.trial_id, t.trial_name, e.attempt, e.run_id, e.agent, e.time, e.outcome, e.duration,"
        " e.redelivered, e.staging, e.reason, t.state AS trial_state, t.finished_at AS trial_finished"
        " FROM run_events e JOIN trial_results t USING (trial_id) WHERE e.sweep_id = %s AND t.sweep_id = %s"
        " AND (%s::text IS NULL OR e.trial_id = %s)",
        (sweep_id, sweep_id, trial_id, trial_id),
    ).fetchall()


def resource_trials(conn: Conn, sweep_id: str, limit: int) -> list[dict[str, Any]]:
    """The trials whose resource use is shown by default: running ones, then the latest to finish."""
    return conn.execute(
        "SELECT trial_id, trial_name, state FROM trial_results WHERE sweep_id = %s AND started_at IS NOT NULL"
        " ORDER BY state = 'running' DESC, finished_at DESC NULLS FIRST, trial_id LIMIT %s", (sweep_id, limit)).fetchall()


def samples(conn: Conn, trial_ids: list[str], prefix: str) -> list[dict[str, Any]]:
    """Every point named ``prefix...`` of the trials, by trial, name and step
    (the agent's ``sys/`` samples: step = the trial's running seconds)."""
    return conn.execute(
        "SELECT DISTINCT ON (trial_id, name, step) trial_id, name, step, value FROM metric_points"
        " WHERE trial_id = ANY(%s) AND starts_with(name, %s) ORDER BY trial_id, name, step, attempt DESC",
        (trial_ids, prefix),
    ).fetchall()


def attempts(conn: Conn, trial_id: str) -> list[dict[str, Any]]:
    """What each attempt of a trial reported: steps (of its metrics: the
    agent's ``sys/`` samples count running seconds, not steps), points, first
    and last time."""
    return conn.execute(
        "SELECT attempt, min(step) FILTER (WHERE NOT starts_with(name, 'sys/')) AS first_step,"
        " max(step) FILTER (WHERE NOT starts_with(name, 'sys/')) AS last_step, count(*) AS points,"
        " min(recorded_at) AS first_at, max(recorded_at) AS last_at"
        " FROM metric_points WHERE trial_id = %s GROUP BY attempt ORDER BY attempt",
        (trial_id,),
    ).fetchall()


def trial_metric_names(conn: Conn, trial_id: str) -> list[str]:
    rows = conn.execute("SELECT DISTINCT name FROM metric_points WHERE trial_id = %s ORDER BY name", (trial_id,)).fetchall()
    return [r["name"] for r in rows]
