-- depends: 0001.initial
-- The public view sweep_results: one row per sweep, what the dashboard, the
-- report and the Python API show of it (docs/results.md). Idempotent
-- (CREATE OR REPLACE; new columns go last, as CREATE OR REPLACE VIEW appends only).
-- A stored spec is what the client sent, even for a rejected sweep: every value
-- read from it is checked before it is cast, so no spec can make the view fail.

CREATE OR REPLACE VIEW sweep_results AS
SELECT s.sweep_id, s.name, s.state, s.error, s.note, s.created_at, s.finished_at,
       o.metric, o.mode, c.repeats, c.gpus,
       a.trials, a.pending, a.queued, a.running, a.completed, a.pruned, a.failed, a.cancelled,
       a.best, a.run_seconds,
       a.run_seconds * c.gpus / 3600 AS gpu_hours,
       p.gpu_hour * a.run_seconds * c.gpus / 3600 AS cost,
       p.on_demand_gpu_hour * a.run_seconds * c.gpus / 3600 AS on_demand_cost,
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
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE NOT t.smoke) AS trials,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'pending') AS pending,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'queued') AS queued,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'running') AS running,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'completed') AS completed,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'pruned') AS pruned,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'failed') AS failed,
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'cancelled') AS cancelled,
           CASE WHEN o.mode = 'max' THEN max(t.value) ELSE min(t.value) END AS best,
           COALESCE(sum(t.run_seconds), 0) AS run_seconds
    FROM (SELECT t.state, t.idx < 0 AS smoke, t.run_seconds,
                 CASE WHEN t.state = 'completed' AND t.idx >= 0 AND jsonb_typeof(t.metrics->o.metric) = 'number'
                      THEN (t.metrics->>o.metric)::float END AS value
          FROM trials t WHERE t.sweep_id = s.sweep_id) t
) a;
