-- depends: 0003.run-events
-- A trial may wait at a successive-halving rung for a promotion (ASHA's
-- promotion rule of Li et al.): state 'paused', neither in flight nor ended.
-- Idempotent.

ALTER TABLE trials DROP CONSTRAINT IF EXISTS trials_state_check;
ALTER TABLE trials ADD CONSTRAINT trials_state_check
    CHECK (state IN ('pending', 'queued', 'running', 'paused', 'completed', 'pruned', 'failed', 'cancelled'));
