-- 0004: the fire ledger's entries (scheduler/core/ledger.py): occurrences of a recurring job
-- that will not run and have no slot that says why (dropped by the catch-up policy, withdrawn
-- by a redefinition or a delete), one row per (job, fire time) with its reason, copied from
-- the `not_run` events. Rare (never the hot path), so a plain table: retention deletes by
-- fire time rather than dropping day partitions. Occurrences skipped for overlap have their
-- skipped slot row instead.

CREATE TABLE fire_entries (
    namespace   text NOT NULL,
    job_id      text NOT NULL,
    fire_ms     bigint NOT NULL,
    reason      text NOT NULL,
    PRIMARY KEY (namespace, job_id, fire_ms)
);
CREATE INDEX fire_entries_fire ON fire_entries (fire_ms);
