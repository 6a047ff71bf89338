-- depends: 0001.initial
-- The public view sweep_results: one row per sweep, what the dashboard, the
-- report and the Python API show of it (docs/results.md). Idempotent
-- (CREATE OR REPLACE; new columns go last, as CREATE OR REPLACE VIEW appends only).
-- A stored spec is what the client sent, even for a rejected sweep: every value
-- read from it is checked before it is cast, so no spec can make the view fail.

CREATE OR REPLACE VIEW sweep_results AS
SELECT s.sweep_id, s.name, s.state, s.error, s.note, s.created_at, s.finished_at,
       o.metric, o.mode, c.repeats, c.gpus,
       COALESCE(a.trials, 0) AS trials, COALESCE(a.pending, 0) AS pending, COALESCE(a.queued, 0) AS queued,
       COALESCE(a.running, 0) AS running, COALESCE(a.completed, 0) AS completed, COALESCE(a.pruned, 0) AS pruned,
       COALESCE(a.failed, 0) AS failed, COALESCE(a.cancelled, 0) AS cancelled,
       CASE WHEN o.mode = 'max' THEN a.hi ELSE a.lo END AS best,
       COALESCE(a.run_seconds, 0) AS run_seconds,
       COALESCE(a.run_seconds, 0) * c.gpus / 3600 AS gpu_hours,
       p.gpu_hour * COALESCE(a.run_seconds, 0) * c.gpus / 3600 AS cost,
       p.on_demand_gpu_hour * COALESCE(a.run_seconds, 0) * c.gpus / 3600 AS on_demand_cost,
       s.total_trials AS planned, s.spec
FROM sweeps s
CROSS JOIN LATERAL (
    SELECT COALESCE(s.spec->'metric'->>'name', s.spec->'metric'->0->>'name', '') AS metric,
           CASE WHEN COALESCE(s.spec->'metric'->>'mode', s.spec->'metric'->0->>'mode') = 'max' THEN 'max' ELSE 'min' END AS mode
) o
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.spec->>'repeats' ~ '^[0-9]{1,6}$' THEN greatest(1, (s.spec->>'repeats')::int) ELSE 1 END AS repeats,
           CASE WHEN s.spec->'resources'->>'gpus' ~ '^[0-9]{1,6}$' THEN greatest(1, (s.spec->'resources'->>'gpus')::int)
                ELSE 1 END AS gpus
) c
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.spec->'pricing'->>'gpu_hour' ~ '^[0-9]{1,12}(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?$'
                THEN (s.spec->'pricing'->>'gpu_hour')::float END AS gpu_hour,
           CASE WHEN s.spec->'pricing'->>'on_demand_gpu_hour' ~ '^[0-9]{1,12}(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?$'
                THEN (s.spec->'pricing'->>'on_demand_gpu_hour')::float END AS on_demand_gpu_hour
) p
-- One aggregate over the trials grouped by sweep (not a subquery per sweep: its cost estimate, times the
-- sweeps, set off PostgreSQL's JIT, a second per call); a filter on sweep_id reaches it through the join.
LEFT JOIN (
    SELECT t.sweep_id,
           count(*) FILTER (WHERE NOT t.smoke) AS trials,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'pending') AS pending,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'queued') AS queued,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'running') AS running,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'completed') AS completed,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'pruned') AS pruned,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'failed') AS failed,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'cancelled') AS cancelled,
           min(t.value) AS lo, max(t.value) AS hi,
           sum(t.run_seconds) AS run_seconds
    FROM (SELECT t.sweep_id, t.state, t.idx < 0 AS smoke, t.run_seconds,
                 CASE WHEN t.state = 'completed' AND t.idx >= 0 AND jsonb_typeof(t.metrics->m.metric) = 'number'
                      THEN (t.metrics->>m.metric)::float END AS value
          FROM trials t
          JOIN (SELECT sweep_id, COALESCE(spec->'metric'->>'name', spec->'metric'->0->>'name', '') AS metric
                FROM sweeps) m ON m.sweep_id = t.sweep_id) t
    GROUP BY t.sweep_id
) a ON a.sweep_id = s.sweep_id;
