-- depends: 0004.paused-trials
-- The public view trial_journal: every event the journal (trial_events) holds,
-- starts, ends, losses and checkpoints, with the fields of their bodies that say
-- what happened (docs/results.md). The dashboard's trial page reads it, so a
-- reader role granted the views (deploy/postgres/roles.sql) needs no table.
-- Numbers are taken only when the body holds a JSON number that fits: a body a
-- newer agent shaped otherwise gives NULL, never an error for the whole query.
-- Idempotent (CREATE OR REPLACE; new columns go last).

CREATE OR REPLACE VIEW trial_journal AS
SELECT e.sweep_id, e.trial_id, e.attempt, e.kind,
       e.body->>'run_id' AS run_id, e.body->>'agent' AS agent,
       e.body->>'outcome' AS outcome, e.body->>'failure' AS failure,
       CASE WHEN jsonb_typeof(e.body->'exit_code') = 'number' THEN
            CASE WHEN abs((e.body->'exit_code')::numeric) < 2147483648 THEN round((e.body->'exit_code')::numeric)::int END
       END AS exit_code,
       CASE WHEN jsonb_typeof(e.body->'resume_step') = 'number' THEN
            CASE WHEN abs((e.body->'resume_step')::numeric) < 9e18 THEN round((e.body->'resume_step')::numeric)::bigint END
       END AS resume_step,
       CASE WHEN jsonb_typeof(e.body->'step') = 'number' THEN
            CASE WHEN abs((e.body->'step')::numeric) < 9e18 THEN round((e.body->'step')::numeric)::bigint END
       END AS step,
       e.body->>'reason' AS reason, e.body->>'error' AS error,
       e.recorded_at, e.message_id
FROM trial_events e;
