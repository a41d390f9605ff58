-- name: create_versions
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.outbox_migrations (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: applied
SELECT version FROM {schema}.outbox_migrations ORDER BY version;

-- name: record
INSERT INTO {schema}.outbox_migrations (version) VALUES (%(version)s);

-- name: insert_one
-- `namespace`: the writer's, else (NULL) the one the outbox serves, if a relay recorded it.
INSERT INTO {schema}.outbox (job_id, spec, namespace)
VALUES (%(job_id)s, %(spec)s, COALESCE(CAST(%(namespace)s AS text),
                                       (SELECT namespace FROM {schema}.outbox_namespace)));

-- name: insert_many
INSERT INTO {schema}.outbox (job_id, spec, namespace)
SELECT job_id, spec, COALESCE(CAST(%(namespace)s AS text),
                              (SELECT namespace FROM {schema}.outbox_namespace))
FROM unnest(CAST(%(job_ids)s AS text[]), CAST(%(specs)s AS text[])) AS r (job_id, spec);

-- name: take
-- The oldest rows no other relay holds, locked and deleted in one statement: the DELETE is
-- undone if the transaction rolls back (the relay commits it only once Redis has the jobs),
-- and other relays skip the rows meanwhile.
DELETE FROM {schema}.outbox WHERE seq IN (
    SELECT seq FROM {schema}.outbox ORDER BY seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING seq, job_id, spec, created_at, namespace;

-- name: reject
INSERT INTO {schema}.outbox_rejected (seq, job_id, spec, created_at, namespace, error)
VALUES (%(seq)s, %(job_id)s, %(spec)s, %(created_at)s, %(namespace)s, %(error)s)
ON CONFLICT (seq) DO NOTHING;

-- name: bind
-- Records the namespace the outbox serves, unless one is already; then reads it. Two relays
-- binding at once serialize on the row's key: one namespace wins.
INSERT INTO {schema}.outbox_namespace (namespace) VALUES (%(namespace)s)
ON CONFLICT (only_row) DO NOTHING;

-- name: bound
SELECT namespace FROM {schema}.outbox_namespace;

-- name: lag
-- Rows waiting and the oldest one's age in seconds (0 when none wait).
SELECT count(*), COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at)), 0)
FROM {schema}.outbox;

-- name: rejected
SELECT count(*) FROM {schema}.outbox_rejected;
