-- Each outbox serves one namespace. `outbox_namespace` holds it (one row at most): the first
-- relay records its own, and a relay of another namespace refuses to start. Rows carry the
-- namespace they were written for (outbox.submit's `namespace=`, else the outbox's); a relay
-- moves a row of another namespace to outbox_rejected instead of submitting it. Rows from
-- before this migration have none: they belong to the namespace the outbox serves.
CREATE TABLE IF NOT EXISTS {schema}.outbox_namespace (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    namespace  text NOT NULL,
    bound_at   timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE {schema}.outbox ADD COLUMN IF NOT EXISTS namespace text;
ALTER TABLE {schema}.outbox_rejected ADD COLUMN IF NOT EXISTS namespace text;
