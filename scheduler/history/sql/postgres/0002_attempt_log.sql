-- 0002: a slot's only attempt is no longer copied into a row of its own. The slot row's
-- `state` (the slot hash) already holds it, and the copy was a large share of the store's CPU
-- per job (bench snapshot). The table of attempt rows is now
-- `attempt_log`: the attempts of slots that had more than one, or whose first ended and
-- another follows (state field `a:1`). `attempts` is a view with the columns the table had:
-- those rows, and for every other claimed slot its one attempt, read from its state (which
-- wins over a row an older version wrote for it). Queries on `attempts` go on working.
-- Also dropped: `jobs_kind`, an index no query uses, that every job insert paid for. And
-- `slots_status` keeps only the slots that did not succeed: it serves the queries that filter
-- on status (recovery's scheduled/queued/running, an operator's look at failures), and
-- leaving succeeded slots (nearly all) out saves Postgres work on every job (bench snapshot);
-- `sched history --status succeeded` reads the time range instead. On a large history the
-- index is rebuilt partition by partition: the upgrade takes a while.

ALTER TABLE attempts RENAME TO attempt_log;
DROP INDEX IF EXISTS jobs_kind;
DROP INDEX IF EXISTS slots_status;
CREATE INDEX slots_status ON slots (namespace, status, fire_ms) WHERE status <> 'succeeded';

CREATE VIEW attempts AS
SELECT a.namespace, a.job_id, a.fire_ms, a.number, a.worker, a.claimed_ms, a.lease_until_ms,
       a.started_ms, a.finished_ms, a.outcome, a.error, a.version
FROM attempt_log a
WHERE NOT EXISTS (SELECT 1 FROM slots s
                  WHERE s.namespace = a.namespace AND s.job_id = a.job_id
                    AND s.fire_ms = a.fire_ms AND s.attempt = 1
                    AND (s.state ->> 'a:1') IS NULL)
UNION ALL
SELECT s.namespace, s.job_id, s.fire_ms, 1, NULLIF(s.state ->> 'worker', ''),
       NULLIF(s.state ->> 'claimed_ms', '')::bigint,
       NULLIF(s.state ->> 'lease_until', '')::bigint,
       NULLIF(s.state ->> 'started_ms', '')::bigint,
       NULLIF(s.state ->> 'finished_ms', '')::bigint,
       NULLIF(s.state ->> 'outcome', ''), NULL::text, s.version
FROM slots s
WHERE s.attempt = 1 AND (s.state ->> 'a:1') IS NULL;
