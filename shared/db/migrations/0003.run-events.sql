-- depends: 0002.sweep-results
-- The public view run_events: each run's start and end as the planner journals
-- them (trial_events), the fields of the bodies that say who ran what, when
-- (docs/results.md); the dashboard's timeline reads it. Idempotent.

CREATE INDEX IF NOT EXISTS trial_events_sweep ON trial_events (sweep_id);

CREATE OR REPLACE VIEW run_events AS
SELECT e.sweep_id, e.trial_id, e.attempt, e.kind,
       e.body->>'run_id' AS run_id, e.body->>'agent' AS agent, (e.body->>'time')::timestamptz AS time,
       e.body->>'outcome' AS outcome, e.body->>'failure' AS failure,
       CASE WHEN jsonb_typeof(e.body->'duration') = 'number' THEN (e.body->>'duration')::float END AS duration,
       e.recorded_at
FROM trial_events e
WHERE e.kind IN ('trial.started', 'trial.finished', 'trial.lost');
