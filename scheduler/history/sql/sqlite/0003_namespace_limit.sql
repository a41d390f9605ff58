-- 0003: a namespace's payload limit, next to its shard count (the postgres migration of the
-- same number says why). NULL: not known yet.

ALTER TABLE namespaces ADD COLUMN max_payload_bytes INTEGER;
