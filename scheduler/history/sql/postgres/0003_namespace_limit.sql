-- 0003: a namespace's payload limit, next to its shard count, so that `sched recover`
-- rebuilds a namespace with the limit it had rather than the default. NULL: not known yet
-- (written by the next snapshotter to start).

ALTER TABLE namespaces ADD COLUMN max_payload_bytes bigint;
