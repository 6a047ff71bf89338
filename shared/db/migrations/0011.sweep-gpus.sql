-- depends: 0010.run-events-losses
-- sweep_results.gpus is the spec's resources.gpus (1 when absent, as the spec's
-- default), 0 for a CPU-only sweep (0008 raised 0 to 1, so the column misstated
-- the spec). gpu_hours, cost and on_demand_cost are unchanged: a CPU-only trial
-- counts as one slot (slot-hours, as the dashboard and budget.max_gpu_hours
-- count it), so they use greatest(gpus, 1).
-- The view is 0008's with those changes only (columns and their order unchanged).

CREATE OR REPLACE VIEW sweep_results AS
SELECT s.sweep_id, s.name, s.state, s.error, s.note, s.created_at, s.finished_at,
       o.metric, o.mode, c.repeats, c.gpus,
       COALESCE(a.trials, 0) AS trials, COALESCE(a.pending, 0) AS pending, COALESCE(a.queued, 0) AS queued,
       COALESCE(a.running, 0) AS running, COALESCE(a.completed, 0) AS completed, COALESCE(a.pruned, 0) AS pruned,
       COALESCE(a.failed, 0) AS failed, COALESCE(a.cancelled, 0) AS cancelled,
       CASE WHEN o.mode = 'max' THEN a.hi ELSE a.lo END AS best,
       COALESCE(a.run_seconds, 0) AS run_seconds,
       COALESCE(a.run_seconds, 0) * greatest(c.gpus, 1) / 3600 AS gpu_hours,
       p.gpu_hour * COALESCE(a.run_seconds, 0) * greatest(c.gpus, 1) / 3600 AS cost,
       p.on_demand_gpu_hour * COALESCE(a.run_seconds, 0) * greatest(c.gpus, 1) / 3600 AS on_demand_cost,
       s.total_trials AS planned, s.spec,
       COALESCE(a.paused, 0) AS paused, COALESCE(a.steps, 0) AS steps, s.spec_version
FROM sweeps s
CROSS JOIN LATERAL (
    SELECT COALESCE(s.spec->'metric'->>'name', s.spec->'metric'->0->>'name', '') AS metric,
           CASE WHEN COALESCE(s.spec->'metric'->>'mode', s.spec->'metric'->0->>'mode') = 'max' THEN 'max' ELSE 'min' END AS mode
) o
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.spec->>'repeats' ~ '^[0-9]{1,6}$' THEN greatest(1, (s.spec->>'repeats')::int) ELSE 1 END AS repeats,
           CASE WHEN s.spec->'resources'->>'gpus' ~ '^[0-9]{1,6}$' THEN (s.spec->'resources'->>'gpus')::int
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
           count(*) FILTER (WHERE NOT t.smoke AND t.state = 'paused') AS paused,
           min(t.value) AS lo, max(t.value) AS hi,
           sum(t.run_seconds) AS run_seconds,
           -- a pbt trial's exploits that resumed at or below the steps counted: those units came from a donor
           sum(t.steps - CASE WHEN t.pbt AND t.steps > 0
                              THEN (SELECT COALESCE(sum(p.from_step - p.start_step), 0)::float8 FROM pbt_segments p
                                    WHERE p.trial_id = t.trial_id AND p.from_step IS NOT NULL AND p.start_step < t.steps)
                              ELSE 0 END) AS steps
    FROM (SELECT t.trial_id, t.sweep_id, t.state, t.idx < 0 AS smoke, t.run_seconds,
                 CASE WHEN t.state = 'completed' AND t.idx >= 0 AND jsonb_typeof(t.metrics->m.metric) = 'number'
                      THEN (t.metrics->>m.metric)::float END AS value,
                 CASE WHEN jsonb_typeof(t.params->m.param) IS DISTINCT FROM 'number' THEN greatest(t.last_step, 0)::float8
                      WHEN t.state IN ('pending', 'queued', 'running')
                      THEN COALESCE((SELECT max(k::float8) FROM jsonb_object_keys(t.rungs) k WHERE k ~ '^[0-9]{1,15}$'), 0)
                      WHEN t.started_at IS NULL THEN 0
                      ELSE (t.params->>m.param)::float8 END AS steps, m.pbt
          FROM trials t
          JOIN (SELECT sweep_id, COALESCE(spec->'metric'->>'name', spec->'metric'->0->>'name', '') AS metric,
                       -- the successive-halving budget parameter: strategy asha's, else early_stop hyperband's
                       COALESCE(CASE WHEN spec->'strategy'->>'type' = 'asha' THEN spec->'strategy'->'budget'->>'param'
                                     WHEN spec->'early_stop'->>'type' = 'hyperband'
                                     THEN spec->'early_stop'->'budget'->>'param'
                                     WHEN spec->'strategy'->>'type' = 'pbt' THEN spec->'strategy'->'interval'->>'param'
                                     END, '') AS param,
                       spec->'strategy'->>'type' = 'pbt' AS pbt
                FROM sweeps) m ON m.sweep_id = t.sweep_id) t
    GROUP BY t.sweep_id
) a ON a.sweep_id = s.sweep_id;
