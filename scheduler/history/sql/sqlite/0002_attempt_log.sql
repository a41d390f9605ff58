-- 0002: a slot's only attempt is no longer copied into a row of its own (the postgres
-- migration of the same number says why). `attempt_log` holds the attempts of slots that had
-- more than one, and `attempts` is a view of those and of every other claimed slot's one
-- attempt, read from its state. `jobs_kind`, which no query used, is dropped.

ALTER TABLE attempts RENAME TO attempt_log;
DROP INDEX IF EXISTS jobs_kind;

CREATE VIEW attempts AS
SELECT a.namespace, a.job_id, a.fire_ms, a.number, a.worker, a.claimed_ms, a.lease_until_ms,
       a.started_ms, a.finished_ms, a.outcome, a.error, a.version
FROM attempt_log a
WHERE NOT EXISTS (SELECT 1 FROM slots s
                  WHERE s.namespace = a.namespace AND s.job_id = a.job_id
                    AND s.fire_ms = a.fire_ms AND s.attempt = 1
                    AND json_extract(s.state, '$."a:1"') IS NULL)
UNION ALL
SELECT s.namespace, s.job_id, s.fire_ms, 1, NULLIF(json_extract(s.state, '$.worker'), ''),
       CAST(NULLIF(json_extract(s.state, '$.claimed_ms'), '') AS INTEGER),
       CAST(NULLIF(json_extract(s.state, '$.lease_until'), '') AS INTEGER),
       CAST(NULLIF(json_extract(s.state, '$.started_ms'), '') AS INTEGER),
       CAST(NULLIF(json_extract(s.state, '$.finished_ms'), '') AS INTEGER),
       NULLIF(json_extract(s.state, '$.outcome'), ''), NULL, s.version
FROM slots s
WHERE s.attempt = 1 AND json_extract(s.state, '$."a:1"') IS NULL;
