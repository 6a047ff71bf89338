-- depends: 0009.agents
-- run_events (0003) with three columns more, last: redelivered (the start of a
-- run the broker took back from a vanished agent: the run before it of the same
-- attempt ended, lost, though nothing journalled its end), staging (seconds the
-- agent spent staging the trial's inputs before the start) and reason (why a run
-- was lost). The dashboard's timeline ends a lost run with them (docs/results.md).
-- Idempotent (CREATE OR REPLACE; new columns go last).

CREATE OR REPLACE VIEW run_events AS
SELECT e.sweep_id, e.trial_id, e.attempt, e.kind,
       e.body->>'run_id' AS run_id, e.body->>'agent' AS agent, (e.body->>'time')::timestamptz AS time,
       e.body->>'outcome' AS outcome, e.body->>'failure' AS failure,
       CASE WHEN jsonb_typeof(e.body->'duration') = 'number' THEN (e.body->>'duration')::float END AS duration,
       e.recorded_at,
       COALESCE(e.body->>'redelivered' = 'true', false) AS redelivered,
       CASE WHEN jsonb_typeof(e.body->'staging') = 'number' THEN (e.body->>'staging')::float END AS staging,
       e.body->>'reason' AS reason
FROM trial_events e
WHERE e.kind IN ('trial.started', 'trial.finished', 'trial.lost');
