-- Named queries of the embedded (SQLite) history store; `-- name: X` starts query X.

-- name: upsert_jobs
INSERT INTO jobs (namespace, job_id, task, queue, kind, created_ms, fire_ms, definition)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, job_id) DO UPDATE SET
    task = excluded.task, queue = excluded.queue, kind = excluded.kind,
    created_ms = excluded.created_ms, fire_ms = excluded.fire_ms,
    definition = excluded.definition;

-- name: upsert_slots
INSERT INTO slots (namespace, job_id, fire_ms, status, task, queue, attempt, failures,
                   available_ms, finished_ms, version, state)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, job_id, fire_ms) DO UPDATE SET
    status = excluded.status, task = excluded.task, queue = excluded.queue,
    attempt = excluded.attempt, failures = excluded.failures,
    available_ms = excluded.available_ms, finished_ms = excluded.finished_ms,
    version = excluded.version, state = excluded.state
WHERE slots.version <= excluded.version;

-- name: upsert_attempts
INSERT INTO attempt_log (namespace, job_id, fire_ms, number, worker, claimed_ms, lease_until_ms,
                      started_ms, finished_ms, outcome, error, version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, job_id, fire_ms, number) DO UPDATE SET
    worker = excluded.worker, claimed_ms = excluded.claimed_ms,
    lease_until_ms = excluded.lease_until_ms, started_ms = excluded.started_ms,
    finished_ms = excluded.finished_ms, outcome = excluded.outcome, error = excluded.error,
    version = excluded.version
WHERE attempt_log.version <= excluded.version;

-- name: drop_slots_before
DELETE FROM slots WHERE fire_ms < :cutoff_ms;

-- name: drop_attempts_before
DELETE FROM attempt_log WHERE fire_ms < :cutoff_ms;

-- name: drop_orphan_jobs
DELETE FROM jobs WHERE kind <> 'cron' AND created_ms < :cutoff_ms
AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.namespace = jobs.namespace AND s.job_id = jobs.job_id);

-- name: put_namespace
INSERT INTO namespaces (namespace, shards, max_payload_bytes, updated_ms)
VALUES (:namespace, :shards, :max_payload_bytes, :now_ms)
ON CONFLICT (namespace) DO UPDATE SET shards = excluded.shards,
    max_payload_bytes = COALESCE(excluded.max_payload_bytes, namespaces.max_payload_bytes),
    updated_ms = excluded.updated_ms;

-- name: get_namespace
SELECT shards, max_payload_bytes FROM namespaces WHERE namespace = :namespace;

-- name: history
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = :namespace
  AND (:job_id IS NULL OR job_id = :job_id)
  AND (:status IS NULL OR status = :status)
  AND fire_ms >= :since_ms AND fire_ms < :until_ms
ORDER BY fire_ms DESC, job_id
LIMIT :limit;

-- name: slot_states
SELECT job_id, fire_ms, state FROM slots WHERE namespace = :namespace ORDER BY job_id, fire_ms;

-- name: job_definitions
SELECT job_id, definition FROM jobs WHERE namespace = :namespace ORDER BY job_id;

-- name: slot_states_of
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = :namespace AND job_id IN (SELECT value FROM json_each(:jobs))
ORDER BY job_id, fire_ms;

-- name: job_definitions_of
SELECT job_id, definition FROM jobs
WHERE namespace = :namespace AND job_id IN (SELECT value FROM json_each(:jobs))
ORDER BY job_id;

-- name: recovery_jobs
SELECT j.job_id, j.definition, j.kind, j.created_ms,
       (SELECT max(s.fire_ms) FROM slots s
        WHERE s.namespace = j.namespace AND s.job_id = j.job_id) AS last_fire_ms
FROM jobs j
WHERE j.namespace = :namespace
  AND (j.kind = 'cron' OR EXISTS (
       SELECT 1 FROM slots s WHERE s.namespace = j.namespace AND s.job_id = j.job_id
       AND s.status IN ('scheduled', 'queued', 'running'))
       -- a job whose slot row never reached the store (held back, or the snapshotter's lag)
       OR NOT EXISTS (SELECT 1 FROM slots s WHERE s.namespace = j.namespace
                      AND s.job_id = j.job_id));

-- name: recovery_slots
SELECT job_id, fire_ms, state FROM slots
WHERE namespace = :namespace AND status IN ('scheduled', 'queued', 'running');

-- name: upsert_fires
INSERT INTO fire_entries (namespace, job_id, fire_ms, reason) VALUES (?, ?, ?, ?)
ON CONFLICT (namespace, job_id, fire_ms) DO UPDATE SET reason = excluded.reason;

-- name: drop_fires_before
DELETE FROM fire_entries WHERE fire_ms < :cutoff_ms;

-- name: fire_entries
SELECT fire_ms, reason FROM fire_entries
WHERE namespace = :namespace AND job_id = :job_id
  AND fire_ms >= :since_ms AND fire_ms < :until_ms
ORDER BY fire_ms
LIMIT :limit;

-- name: ledger_slots
SELECT fire_ms, state FROM slots
WHERE namespace = :namespace AND job_id = :job_id
  AND fire_ms >= :since_ms AND fire_ms < :until_ms
ORDER BY fire_ms
LIMIT :limit;
