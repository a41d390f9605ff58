"""The transactional outbox: `submit` / `submit_many` write jobs as rows of the application's
own Postgres transaction (scheduler/outbox/writer.py), and `OutboxRelay` moves the committed
rows into Redis (scheduler/outbox/relay.py). The docs' "Transactional outbox" guide says how
to use them."""

from scheduler.outbox.writer import DEFAULT_SCHEMA, submit, submit_many

__all__ = ["DEFAULT_SCHEMA", "submit", "submit_many"]
