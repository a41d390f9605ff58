-- 0001: the history store. One row per job definition, per slot (job_id, fire_ms) and per
-- attempt. Slots and attempts are partitioned by the day of the slot's fire time, so an
-- attempt lives in its slot's partition and retention drops whole days (no DELETE). The store
-- creates each day's partitions before it writes rows for that day (create_partition below).
-- `version` is the shard's last events-stream id when the row's state was read from Redis
-- (ms * 1e6 + seq): an upsert never replaces a row with an older reading.

CREATE TABLE namespaces (
    namespace   text PRIMARY KEY,
    shards      integer NOT NULL,
    updated_ms  bigint NOT NULL
);

CREATE TABLE jobs (
    namespace   text NOT NULL,
    job_id      text NOT NULL,
    task        text NOT NULL,
    queue       text NOT NULL,
    kind        text NOT NULL,
    created_ms  bigint NOT NULL,
    fire_ms     bigint NOT NULL,
    definition  json NOT NULL,  -- the job hash, field -> value, restored verbatim by recover
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX jobs_kind ON jobs (namespace, kind);

CREATE TABLE slots (
    namespace     text NOT NULL,
    job_id        text NOT NULL,
    fire_ms       bigint NOT NULL,
    status        text NOT NULL CHECK (status IN
                  ('scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'lost',
                  'skipped')),
    task          text NOT NULL,
    queue         text NOT NULL,
    attempt       integer NOT NULL,
    failures      integer NOT NULL,
    available_ms  bigint,
    finished_ms   bigint,
    version       bigint NOT NULL,
    state         json NOT NULL,  -- the slot hash (attempts included), restored by recover
    PRIMARY KEY (namespace, job_id, fire_ms)
) PARTITION BY RANGE (fire_ms);
CREATE INDEX slots_status ON slots (namespace, status, fire_ms);

CREATE TABLE attempts (
    namespace       text NOT NULL,
    job_id          text NOT NULL,
    fire_ms         bigint NOT NULL,
    number          integer NOT NULL,
    worker          text,
    claimed_ms      bigint,
    lease_until_ms  bigint,
    started_ms      bigint,
    finished_ms     bigint,
    outcome         text,
    error           text,
    version         bigint NOT NULL,
    PRIMARY KEY (namespace, job_id, fire_ms, number)
) PARTITION BY RANGE (fire_ms);
