"""The transactional outbox: `submit` / `submit_many` write jobs as rows of the application's
own Postgres transaction (scheduler/outbox/writer.py), and `OutboxRelay` moves the committed
rows into Redis (scheduler/outbox/relay.py). docs/guide/outbox.md is the user's guide."""

from scheduler.outbox.writer import DEFAULT_SCHEMA, submit, submit_many

__all__ = ["DEFAULT_SCHEMA", "submit", "submit_many"]
