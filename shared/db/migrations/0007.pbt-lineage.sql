-- depends: 0006.trial-journal
-- Population-based training's lineage (strategy pbt, docs/search.md): one row per
-- segment of a trial, written by the planner with the decision that started it.
-- The public view trial_segments adds each pbt trial's first segment while it
-- runs (its params as launched), and the donor's name (docs/results.md).
-- Idempotent (IF NOT EXISTS, CREATE OR REPLACE; new view columns go last).

CREATE TABLE IF NOT EXISTS pbt_segments (
    trial_id      text NOT NULL REFERENCES trials (trial_id) ON DELETE CASCADE,
    segment       int NOT NULL,          -- 1, 2, ...: the trial's segments in order
    sweep_id      text NOT NULL,
    attempt       int NOT NULL,          -- the attempt that starts the segment
    start_step    bigint NOT NULL,       -- the budget it starts from (0: the first)
    end_step      bigint NOT NULL,       -- the budget it runs to
    params        jsonb NOT NULL,        -- the params it runs with
    from_trial_id text,                  -- exploit: the trial whose checkpoint it starts from; NULL: its own
    from_step     bigint,                -- exploit: the step of the checkpoint copied
    copied_at     timestamptz,           -- exploit: when the copy was done (NULL: still to do)
    copy_note     text,                  -- exploit: why nothing was copied (the donor had no checkpoint)
    value         double precision,      -- the objective at end_step, once the segment ended
    decided_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trial_id, segment)
);

-- The planner's outbox looks up the copies still to do.
CREATE INDEX IF NOT EXISTS pbt_segments_uncopied ON pbt_segments (sweep_id)
    WHERE from_trial_id IS NOT NULL AND copied_at IS NULL;

CREATE OR REPLACE VIEW trial_segments AS
SELECT t.sweep_id, t.trial_id, t.trial_name, p.segment, p.attempt, p.start_step, p.end_step, p.params,
       p.from_trial_id, d.trial_name AS from_trial_name, p.from_step, p.value, p.decided_at, p.copied_at, p.copy_note
FROM pbt_segments p
JOIN trials t ON t.trial_id = p.trial_id
LEFT JOIN trials d ON d.trial_id = p.from_trial_id
UNION ALL
SELECT t.sweep_id, t.trial_id, t.trial_name, 1, 1, 0,
       CASE WHEN jsonb_typeof(t.params -> (s.spec->'strategy'->'interval'->>'param')) = 'number'
            THEN (t.params ->> (s.spec->'strategy'->'interval'->>'param'))::numeric::bigint END,
       t.params, NULL, NULL, NULL, NULL, t.created_at, NULL, NULL
FROM trials t
JOIN sweeps s ON s.sweep_id = t.sweep_id
WHERE s.spec->'strategy'->>'type' = 'pbt' AND t.idx >= 0
  AND NOT EXISTS (SELECT 1 FROM pbt_segments p WHERE p.trial_id = t.trial_id);
