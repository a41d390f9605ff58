"""The range of every number a component's config takes, one table per config: the Struct
checks it (finite.check_bounds) and the CLI gives the option of each field the same range
(cli/options.py, bounded), so a value out of range is refused the same way, before anything
starts. docs/operating/cli.md lists them (Ranges).

The sizes of one worker are bounded too: past them a value is a typo or an overflow, not a
plan, and taking it would exhaust the machine (`--processes 99999999999999999999999` forks
until the kernel kills the supervisor)."""

from __future__ import annotations

from scheduler.core.finite import Bounds
from scheduler.core.limits import MAX_CONCURRENCY
from scheduler.core.models import (
    MAX_COUNT,
    MAX_EVENTS_MAXLEN,
    MAX_LEASE_S,
    MAX_LOOKAHEAD_S,
    MAX_SECONDS,
)

MAX_WORKER_CONCURRENCY = 100_000  # runs in flight in one worker process (--concurrency)
MAX_PROCESS_POOL = 1024  # children of one worker's process pool (--process-pool)
MAX_PROCESSES = 1024  # worker processes under one supervisor (--processes)

# WorkerConfig (scheduler/worker/config.py): `sched worker` and `sched dev`.
WORKER_BOUNDS: Bounds = {
    "concurrency": (1, MAX_WORKER_CONCURRENCY), "batch": (1, MAX_COUNT), "pipelines": (1, 64),
    "block_ms": (1, 60_000), "lease_s": (1, MAX_LEASE_S), "grace_s": (0, MAX_SECONDS),
    "claim_replicas": (0, 1000), "replica_timeout_s": (0.001, MAX_SECONDS),
    "process_pool": (1, MAX_PROCESS_POOL), "max_tasks_per_child": (0, MAX_COUNT * 1000),
    "events_maxlen": (1, MAX_EVENTS_MAXLEN),
}

# NodeConfig (scheduler/node/node.py): `sched scheduler`.
NODE_BOUNDS: Bounds = {
    "shard_lease_s": (0.3, MAX_LEASE_S), "lease_s": (1, MAX_LEASE_S),
    "reclaim_interval_s": (0, MAX_SECONDS), "lookahead_s": (0, MAX_LOOKAHEAD_S),
    "promote_ahead_s": (0, MAX_SECONDS), "misfire_grace_s": (0, MAX_SECONDS),
    "sweep_interval_s": (0, MAX_SECONDS), "sweep_keys_per_s": (1, MAX_COUNT),
    "queue_idle_s": (0, MAX_SECONDS), "events_maxlen": (1, MAX_EVENTS_MAXLEN),
    "on_time_target": (0, 1), "objective_window_s": (1, 7 * 86400),
}

# SnapshotterConfig (scheduler/history/intake.py): `sched snapshotter`.
SNAPSHOTTER_BOUNDS: Bounds = {
    "read_count": (1, MAX_COUNT), "batch_records": (1, MAX_COUNT),
    "claim_idle_s": (0, MAX_SECONDS), "idle_sleep_s": (0, MAX_SECONDS),
    "settle_s": (0, MAX_SECONDS), "retention_s": (0, MAX_SECONDS),
    "seen_capacity": (0, 100 * MAX_COUNT), "defer_s": (0, MAX_SECONDS),
}

# RetentionConfig (scheduler/history/retention.py): `sched snapshotter --retention,
# --history-days`.
RETENTION_BOUNDS: Bounds = {
    "retention_s": (0, MAX_SECONDS), "history_days": (1, 36_600), "batch": (1, MAX_COUNT),
    "interval_s": (0, MAX_SECONDS), "history_interval_s": (0, MAX_SECONDS),
}

# RelayConfig (scheduler/outbox/relay.py): `sched outbox relay`.
RELAY_BOUNDS: Bounds = {
    "batch": (1, MAX_COUNT), "poll_s": (0, MAX_SECONDS), "max_backoff_s": (0, MAX_SECONDS),
    "lag_every_s": (0, MAX_SECONDS),
}

# AutoscaleConfig (scheduler/worker/autoscale.py): `sched worker --autoscale`.
AUTOSCALE_BOUNDS: Bounds = {
    "min_concurrency": (1, MAX_WORKER_CONCURRENCY),
    "max_concurrency": (1, MAX_WORKER_CONCURRENCY),
    "target_lag_ms": (0, MAX_SECONDS * 1000), "interval_s": (0, MAX_SECONDS),
    "raise_after": (1, MAX_COUNT), "lower_after": (1, MAX_COUNT),
}

# ScalingTarget (scheduler/observe/capacity.py): `--target-lag`, `--target-utilisation`.
SCALING_BOUNDS: Bounds = {
    "target_lag_s": (0, MAX_SECONDS), "utilisation": (0, 1),
    "slots_per_worker": (1, MAX_CONCURRENCY),
}
