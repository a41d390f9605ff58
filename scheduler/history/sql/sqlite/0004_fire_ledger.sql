-- 0004: the fire ledger's entries (the postgres migration of the same number says why).

CREATE TABLE fire_entries (
    namespace   TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    fire_ms     INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    PRIMARY KEY (namespace, job_id, fire_ms)
);
CREATE INDEX fire_entries_fire ON fire_entries (fire_ms);
