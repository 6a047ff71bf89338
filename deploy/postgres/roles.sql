-- Least-privilege PostgreSQL roles for spotsweep (docs/security.md). Idempotent.
--
-- Run as a superuser in the spotsweep database after the first `spotsweep migrate`,
-- and again after an upgrade that adds tables or views:
--   psql "$SPOTSWEEP_ADMIN_URL" -v ON_ERROR_STOP=1 -f deploy/postgres/roles.sql
-- Roles are cluster-wide, not part of a database's schema: hence a script, not a migration.
--
--   spotsweep_writer  the planner, the collector, `spotsweep migrate`: owns the schema's tables
--                     and views (migrations alter them) and writes the tables.
--   spotsweep_reader  `status`, `ls`, `report`, the dashboard, `spotsweep.results()`: SELECT on
--                     the public views trial_results, metric_points, sweep_results, run_events,
--                     trial_journal, trial_segments, agent_capacity (and the migration record, which readers check, never
--                     write); no table.
--
-- Both are groups (NOLOGIN); give each process a login of its own, e.g.
--   CREATE ROLE spotsweep_planner LOGIN PASSWORD '...' IN ROLE spotsweep_writer;
--   CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE spotsweep_reader;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'spotsweep_writer') THEN
    CREATE ROLE spotsweep_writer NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'spotsweep_reader') THEN
    CREATE ROLE spotsweep_reader NOLOGIN;
  END IF;
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO spotsweep_writer, spotsweep_reader', current_database());
END
$$;

GRANT USAGE, CREATE ON SCHEMA public TO spotsweep_writer;
GRANT USAGE ON SCHEMA public TO spotsweep_reader;

-- The writer owns every table, view and sequence (a migration may alter any of them).
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'S', 'p', 'm') LOOP
    EXECUTE format('ALTER %s public.%I OWNER TO spotsweep_writer',
                   CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                  ELSE 'TABLE' END, r.relname);
  END LOOP;
END
$$;

-- The reader: the public views only (a view reads its tables with its owner's rights).
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM spotsweep_reader;
GRANT SELECT ON trial_results, metric_points, sweep_results, run_events, trial_journal, trial_segments,
                agent_capacity TO spotsweep_reader;
GRANT SELECT ON _yoyo_migration TO spotsweep_reader;
