-- 0001: the embedded history store, the same tables as Postgres without partitions (SQLite
-- has none: retention there is a DELETE by fire time). JSON columns are text.

CREATE TABLE namespaces (
    namespace   TEXT PRIMARY KEY,
    shards      INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);

CREATE TABLE jobs (
    namespace   TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    task        TEXT NOT NULL,
    queue       TEXT NOT NULL,
    kind        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    fire_ms     INTEGER NOT NULL,
    definition  TEXT NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX jobs_kind ON jobs (namespace, kind);

CREATE TABLE slots (
    namespace     TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    fire_ms       INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN
                  ('scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'lost',
                  'skipped')),
    task          TEXT NOT NULL,
    queue         TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    available_ms  INTEGER,
    finished_ms   INTEGER,
    version       INTEGER NOT NULL,
    state         TEXT NOT NULL,
    PRIMARY KEY (namespace, job_id, fire_ms)
);
CREATE INDEX slots_status ON slots (namespace, status, fire_ms);
CREATE INDEX slots_fire ON slots (fire_ms);

CREATE TABLE attempts (
    namespace       TEXT NOT NULL,
    job_id          TEXT NOT NULL,
    fire_ms         INTEGER NOT NULL,
    number          INTEGER NOT NULL,
    worker          TEXT,
    claimed_ms      INTEGER,
    lease_until_ms  INTEGER,
    started_ms      INTEGER,
    finished_ms     INTEGER,
    outcome         TEXT,
    error           TEXT,
    version         INTEGER NOT NULL,
    PRIMARY KEY (namespace, job_id, fire_ms, number)
);
CREATE INDEX attempts_fire ON attempts (fire_ms);
