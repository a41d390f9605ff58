"""The durable history: the snapshotter that copies slot and job state into a store
(`store/`: Postgres or SQLite, SQL under `sql/`), retention, and recovery of a lost Redis
from it."""
