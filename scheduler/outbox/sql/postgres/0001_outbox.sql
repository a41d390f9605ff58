-- The outbox: one row per job submitted in an application's transaction, until a relay has
-- handed it to Redis. `seq` orders the rows and names them for the relay's DELETE; `job_id`
-- is the id the job will have (a dedupe key's id may repeat across rows); `spec` is the
-- job's submit arguments as JSON (scheduler/outbox/rows.py). `{schema}` is the schema the
-- operator named (`sched db upgrade --outbox --outbox-schema`).
CREATE TABLE IF NOT EXISTS {schema}.outbox (
    seq         bigserial PRIMARY KEY,
    job_id      text NOT NULL,
    spec        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Rows Redis refused (a payload over the namespace's limit, which only Redis knows): kept
-- with the reason, never dropped.
CREATE TABLE IF NOT EXISTS {schema}.outbox_rejected (
    seq          bigint PRIMARY KEY,
    job_id       text NOT NULL,
    spec         text NOT NULL,
    created_at   timestamptz NOT NULL,
    rejected_at  timestamptz NOT NULL DEFAULT now(),
    error        text NOT NULL
);

-- One notification per inserting statement, delivered at commit (never for a rollback): it
-- wakes the relays LISTENing on the channel `<schema>.outbox`.
CREATE OR REPLACE FUNCTION {schema}.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.outbox', '');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS outbox_notify ON {schema}.outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON {schema}.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.outbox_notify();
