-- spotsweep results database: the schema as of spotsweep's hand-rolled versions 1 to 3
-- (idempotent: it upgrades a database made by any of them in place, rows intact).
-- Every migration here must be idempotent too (IF NOT EXISTS, CREATE OR REPLACE):
-- yoyo records a migration after running it, so a migrator killed in between runs it again.
-- Public read API: the views trial_results and metric_points (docs/results.md).
-- The tables behind them may change between versions; the views will not.

CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id     text PRIMARY KEY,
    name         text NOT NULL,
    spec         json,          -- json, not jsonb: key order of the space is the grid order
    state        text NOT NULL CHECK (state IN ('running', 'completed', 'cancelled', 'rejected', 'failed')),
    error        text,
    total_trials bigint NOT NULL DEFAULT 0,
    next_index   bigint NOT NULL DEFAULT 0,   -- the next config index the planner launches
    priority     int NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

CREATE TABLE IF NOT EXISTS trials (
    trial_id    text PRIMARY KEY,
    sweep_id    text NOT NULL REFERENCES sweeps (sweep_id),
    idx         bigint NOT NULL,
    trial_name  text NOT NULL,
    params      jsonb NOT NULL,
    state       text NOT NULL CHECK (state IN ('pending', 'queued', 'running', 'completed', 'pruned', 'failed', 'cancelled')),
    attempt     int NOT NULL DEFAULT 1,       -- the current attempt; events of others are fenced off
    failures    int NOT NULL DEFAULT 0,
    preemptions int NOT NULL DEFAULT 0,
    metrics     jsonb NOT NULL DEFAULT '{}',
    error       text,
    agent       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz,
    UNIQUE (sweep_id, idx)
);
-- version 2: fault handling
ALTER TABLE trials ADD COLUMN IF NOT EXISTS losses int NOT NULL DEFAULT 0;      -- deliveries of the current attempt lost with their agent
ALTER TABLE trials ADD COLUMN IF NOT EXISTS run_seconds double precision NOT NULL DEFAULT 0;  -- running time over all attempts
ALTER TABLE trials ADD COLUMN IF NOT EXISTS run_id text;                        -- the run of the current attempt that counts
ALTER TABLE trials ADD COLUMN IF NOT EXISTS run_started_at timestamptz;         -- when that run started
-- version 2: search
ALTER TABLE trials ADD COLUMN IF NOT EXISTS rungs jsonb NOT NULL DEFAULT '{}';         -- successive halving: {budget: value} decided
ALTER TABLE trials ADD COLUMN IF NOT EXISTS curve jsonb NOT NULL DEFAULT '{}';         -- early stopping: {step: objective} reported
ALTER TABLE trials ADD COLUMN IF NOT EXISTS search_attrs jsonb NOT NULL DEFAULT '{}';  -- the sampler's per-trial state (Optuna system_attrs)
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS search_attrs json;                         -- the sampler's study state
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS note text;                                 -- why it stopped launching (a budget cap)
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS spec_version int NOT NULL DEFAULT 0;       -- bumped by each `spotsweep extend`
ALTER TABLE sweeps DROP CONSTRAINT IF EXISTS sweeps_state_check;
ALTER TABLE sweeps ADD CONSTRAINT sweeps_state_check CHECK (state IN ('running', 'completed', 'cancelled', 'rejected', 'failed'));
-- version 3: what the agent skipped or cut from a trial's output (tags such as skipped_lines; human text), over all attempts
ALTER TABLE trials ADD COLUMN IF NOT EXISTS flags text[] NOT NULL DEFAULT '{}';
ALTER TABLE trials ADD COLUMN IF NOT EXISTS warnings text[] NOT NULL DEFAULT '{}';
-- version 3: cancels that came before their sweep's spec (kept a day; a cancel of an unknown sweep writes no sweeps row)
CREATE TABLE IF NOT EXISTS early_cancels (
    sweep_id    text PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS trials_inflight ON trials (sweep_id) WHERE state IN ('pending', 'queued', 'running');
CREATE INDEX IF NOT EXISTS trials_pending ON trials (state) WHERE state = 'pending';

CREATE TABLE IF NOT EXISTS points (
    sweep_id    text NOT NULL,
    trial_id    text NOT NULL,
    attempt     int NOT NULL,
    step        bigint NOT NULL,
    name        text NOT NULL,
    value       double precision,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trial_id, attempt, step, name)
);
CREATE INDEX IF NOT EXISTS points_sweep ON points (sweep_id);

CREATE TABLE IF NOT EXISTS trial_events (
    message_id  text PRIMARY KEY,
    sweep_id    text NOT NULL,
    trial_id    text,
    attempt     int,
    kind        text NOT NULL,
    body        jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS trial_events_trial ON trial_events (trial_id);

CREATE OR REPLACE VIEW trial_results AS
SELECT t.sweep_id, s.name AS sweep_name, t.trial_id, t.trial_name, t.state,
       t.params, t.metrics, t.attempt AS attempts, t.preemptions, t.error,
       t.started_at, t.finished_at, t.failures, t.losses, t.run_seconds, t.agent,
       t.idx < 0 AS smoke, t.rungs, t.flags, t.warnings  -- new columns go last: CREATE OR REPLACE VIEW appends only
FROM trials t JOIN sweeps s USING (sweep_id);

CREATE OR REPLACE VIEW metric_points AS
SELECT sweep_id, trial_id, attempt, step, name, value, recorded_at FROM points;
