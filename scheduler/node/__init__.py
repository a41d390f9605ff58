"""A scheduler node (`sched scheduler`): shard leases, and the maintenance loops that promote
due slots, materialize cron occurrences, reclaim lost work, sweep and clean."""
