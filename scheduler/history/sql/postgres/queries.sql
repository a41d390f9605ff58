-- Named queries of the Postgres history store; `-- name: X` starts query X. Placeholders in
-- braces ({slots_part}, ...) are identifiers filled in with psycopg's `sql` module, never values.

-- name: stage
CREATE TEMP TABLE IF NOT EXISTS stage_jobs (LIKE jobs) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_slots (LIKE slots) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_attempts (LIKE attempt_log) ON COMMIT DELETE ROWS;

-- name: copy_jobs
COPY stage_jobs (namespace, job_id, task, queue, kind, created_ms, fire_ms, definition)
FROM STDIN

-- name: copy_slots
COPY stage_slots (namespace, job_id, fire_ms, status, task, queue, attempt, failures,
                  available_ms, finished_ms, version, state)
FROM STDIN

-- name: copy_attempts
COPY stage_attempts (namespace, job_id, fire_ms, number, worker, claimed_ms, lease_until_ms,
                     started_ms, finished_ms, outcome, error, version)
FROM STDIN

-- name: insert_jobs
COPY jobs (namespace, job_id, task, queue, kind, created_ms, fire_ms, definition) FROM STDIN

-- name: insert_slots
COPY slots (namespace, job_id, fire_ms, status, task, queue, attempt, failures, available_ms,
            finished_ms, version, state)
FROM STDIN

-- name: insert_attempts
COPY attempt_log (namespace, job_id, fire_ms, number, worker, claimed_ms, lease_until_ms,
               started_ms, finished_ms, outcome, error, version)
FROM STDIN

-- name: upsert_jobs
INSERT INTO jobs SELECT * FROM stage_jobs ORDER BY namespace, job_id
ON CONFLICT (namespace, job_id) DO UPDATE SET
    task = excluded.task, queue = excluded.queue, kind = excluded.kind,
    created_ms = excluded.created_ms, fire_ms = excluded.fire_ms,
    definition = excluded.definition;

-- name: upsert_slots
INSERT INTO slots SELECT * FROM stage_slots ORDER BY namespace, job_id, fire_ms
ON CONFLICT (namespace, job_id, fire_ms) DO UPDATE SET
    status = excluded.status, task = excluded.task, queue = excluded.queue,
    attempt = excluded.attempt, failures = excluded.failures,
    available_ms = excluded.available_ms, finished_ms = excluded.finished_ms,
    version = excluded.version, state = excluded.state
WHERE slots.version <= excluded.version;

-- name: upsert_attempts
INSERT INTO attempt_log SELECT * FROM stage_attempts ORDER BY namespace, job_id, fire_ms, number
ON CONFLICT (namespace, job_id, fire_ms, number) DO UPDATE SET
    worker = excluded.worker, claimed_ms = excluded.claimed_ms,
    lease_until_ms = excluded.lease_until_ms, started_ms = excluded.started_ms,
    finished_ms = excluded.finished_ms, outcome = excluded.outcome, error = excluded.error,
    version = excluded.version
WHERE attempt_log.version <= excluded.version;

-- name: create_partition
CREATE TABLE IF NOT EXISTS {slots_part} PARTITION OF slots FOR VALUES FROM ({start}) TO ({end});
CREATE TABLE IF NOT EXISTS {attempts_part} PARTITION OF attempt_log FOR VALUES FROM ({start}) TO ({end});

-- name: partitions
SELECT c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname IN ('slots', 'attempt_log') AND p.relnamespace = current_schema()::regnamespace;

-- name: drop_partition
DROP TABLE IF EXISTS {part};

-- name: drop_orphan_jobs
DELETE FROM jobs j WHERE j.kind <> 'cron' AND j.created_ms < %(cutoff_ms)s
AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.namespace = j.namespace AND s.job_id = j.job_id);

-- name: put_namespace
INSERT INTO namespaces (namespace, shards, max_payload_bytes, updated_ms)
VALUES (%(namespace)s, %(shards)s, %(max_payload_bytes)s, %(now_ms)s)
ON CONFLICT (namespace) DO UPDATE SET shards = excluded.shards,
    max_payload_bytes = COALESCE(excluded.max_payload_bytes, namespaces.max_payload_bytes),
    updated_ms = excluded.updated_ms;

-- name: get_namespace
SELECT shards, max_payload_bytes FROM namespaces WHERE namespace = %(namespace)s;

-- name: history
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = %(namespace)s
  AND (%(job_id)s::text IS NULL OR job_id = %(job_id)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND fire_ms >= %(since_ms)s AND fire_ms < %(until_ms)s
ORDER BY fire_ms DESC, job_id
LIMIT %(limit)s;

-- name: slot_states
SELECT job_id, fire_ms, state FROM slots WHERE namespace = %(namespace)s ORDER BY job_id, fire_ms;

-- name: job_definitions
SELECT job_id, definition FROM jobs WHERE namespace = %(namespace)s ORDER BY job_id;

-- name: slot_states_of
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = %(namespace)s AND job_id = ANY(%(jobs)s) ORDER BY job_id, fire_ms;

-- name: job_definitions_of
SELECT job_id, definition FROM jobs
WHERE namespace = %(namespace)s AND job_id = ANY(%(jobs)s) ORDER BY job_id;

-- name: recovery_jobs
SELECT j.job_id, j.definition, j.kind, j.created_ms,
       (SELECT max(s.fire_ms) FROM slots s
        WHERE s.namespace = j.namespace AND s.job_id = j.job_id) AS last_fire_ms
FROM jobs j
WHERE j.namespace = %(namespace)s
  AND (j.kind = 'cron' OR EXISTS (
       SELECT 1 FROM slots s WHERE s.namespace = j.namespace AND s.job_id = j.job_id
       AND s.status IN ('scheduled', 'queued', 'running'))
       -- a job whose slot row never reached the store (held back, or the snapshotter's lag)
       OR NOT EXISTS (SELECT 1 FROM slots s WHERE s.namespace = j.namespace
                      AND s.job_id = j.job_id));

-- name: recovery_slots
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = %(namespace)s AND status IN ('scheduled', 'queued', 'running');

-- name: upsert_fires
INSERT INTO fire_entries (namespace, job_id, fire_ms, reason) VALUES (%s, %s, %s, %s)
ON CONFLICT (namespace, job_id, fire_ms) DO UPDATE SET reason = excluded.reason;

-- name: drop_fires_before
DELETE FROM fire_entries WHERE fire_ms < %(cutoff_ms)s;

-- name: fire_entries
SELECT fire_ms, reason FROM fire_entries
WHERE namespace = %(namespace)s AND job_id = %(job_id)s
  AND fire_ms >= %(since_ms)s AND fire_ms < %(until_ms)s
ORDER BY fire_ms
LIMIT %(limit)s;

-- name: ledger_slots
SELECT fire_ms, state FROM slots
WHERE namespace = %(namespace)s AND job_id = %(job_id)s
  AND fire_ms >= %(since_ms)s AND fire_ms < %(until_ms)s
ORDER BY fire_ms
LIMIT %(limit)s;
