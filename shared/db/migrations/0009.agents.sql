-- depends: 0008.pbt-steps
-- What each agent offers its trials, as it last announced it (message agent.seen, every minute while it is
-- connected; written by the collector), so that `submit` and `status` can name a request that no agent of its
-- resource class can ever hold instead of letting its trials wait in silence. A row is never deleted: readers
-- judge only the agents seen recently (last_seen). The public view agent_capacity is what readers may read.

CREATE TABLE IF NOT EXISTS agents (
    agent_id       text PRIMARY KEY,
    resource_class text NOT NULL,
    slots          integer NOT NULL,
    cpus           double precision NOT NULL,
    memory         bigint NOT NULL,
    gpus           integer NOT NULL DEFAULT 0,
    last_seen      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS agents_class_seen ON agents (resource_class, last_seen);

CREATE OR REPLACE VIEW agent_capacity AS
SELECT agent_id, resource_class, slots, cpus, memory, gpus, last_seen FROM agents;
