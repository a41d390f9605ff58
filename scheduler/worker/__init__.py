"""The worker (`sched worker`): reads dispatch streams, claims, runs handlers, commits
outcomes, keeps leases alive; its task registry and settings."""
