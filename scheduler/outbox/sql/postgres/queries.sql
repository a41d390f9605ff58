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
INSERT INTO {schema}.outbox (job_id, spec) VALUES (%(job_id)s, %(spec)s);

-- name: insert_many
INSERT INTO {schema}.outbox (job_id, spec)
SELECT * FROM unnest(CAST(%(job_ids)s AS text[]), CAST(%(specs)s AS text[]));

-- name: take
-- The oldest rows no other relay holds, locked and deleted in one statement: the DELETE is
-- undone if the transaction rolls back (the relay commits it only once Redis has the jobs),
-- and other relays skip the rows meanwhile.
DELETE FROM {schema}.outbox WHERE seq IN (
    SELECT seq FROM {schema}.outbox ORDER BY seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING seq, job_id, spec, created_at;

-- name: reject
INSERT INTO {schema}.outbox_rejected (seq, job_id, spec, created_at, error)
VALUES (%(seq)s, %(job_id)s, %(spec)s, %(created_at)s, %(error)s) ON CONFLICT (seq) DO NOTHING;

-- name: lag
-- Rows waiting and the oldest one's age in seconds (0 when none wait).
SELECT count(*), COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at)), 0)
FROM {schema}.outbox;

-- name: rejected
SELECT count(*) FROM {schema}.outbox_rejected;
