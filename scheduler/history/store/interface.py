"""The history store's interface, and how a DSN picks its backend (postgres.py for
production, sqlite.py as the embedded default); the backends import only rows.py."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from scheduler.core.errors import MissingExtra, StoreUnavailable
from scheduler.core.masking import masked
from scheduler.core.models import Slot
from scheduler.core.namespace import Meta
from scheduler.history.store.rows import Batch, Ledger, RecoveryJob

DEFAULT_SQLITE_PATH = Path.home() / ".local" / "share" / "sched" / "history.sqlite3"


class HistoryStore(Protocol):
    dialect: str

    def upgrade(self) -> int:
        """Apply the migrations not applied yet; returns the schema version."""

    def schema_version(self) -> int: ...

    def check(self) -> None:
        """Raise StoreUnavailable unless the schema is current."""

    def write(self, batch: Batch) -> None:
        """Upsert a batch in one transaction; committed when this returns."""

    def put_namespace(self, namespace: str, shards: int, now_ms: int,
                      max_payload_bytes: int | None = None) -> None:
        """Record a namespace's settings (`sched recover` creates it with them again); a
        limit of None keeps the one recorded."""

    def get_namespace(self, namespace: str) -> Meta | None: ...

    def history(self, namespace: str, *, job_id: str | None, status: str | None,
                since_ms: int, until_ms: int, limit: int) -> list[Slot]: ...

    def ledger(self, namespace: str, job_id: str, since_ms: int, until_ms: int,
               limit: int) -> Ledger:
        """One job's slots and fire ledger entries whose fire time is in [since_ms,
        until_ms), at most `limit` of each, the earliest."""

    def recovery_jobs(self, namespace: str) -> list[RecoveryJob]: ...

    def recovery_slots(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        """(slot_id, slot hash) of every slot whose last known status is not terminal."""

    def slot_states(self, namespace: str, jobs: Collection[str] | None = None
                    ) -> list[tuple[str, dict[str, str]]]:
        """(slot_id, slot hash) of every slot the store holds (of `jobs` alone, when given),
        whatever its status: the whole state as the snapshotter last read it (what a check
        of history against Redis reads)."""

    def job_definitions(self, namespace: str, jobs: Collection[str] | None = None
                        ) -> list[tuple[str, dict[str, str]]]:
        """(job_id, job hash) of every job the store holds (of `jobs` alone, when given)."""

    def drop_before(self, cutoff_ms: int) -> None:
        """Forget slots (and their attempts) and fire ledger entries that fired before
        cutoff_ms."""

    def close(self) -> None: ...


def is_postgres(dsn: str) -> bool:
    return dsn.startswith(("postgres://", "postgresql://")) or "dbname=" in dsn or "host=" in dsn


def open_store(dsn: str | None = None) -> HistoryStore:
    """`postgresql://...` (or a keyword DSN) -> Postgres; `sqlite:///abs/path`, a file path, or
    None (the embedded default file) -> SQLite, migrated on open (with `?mode=ro` at the end:
    opened read-only, and only if the file exists). A Postgres schema is migrated by
    `sched db upgrade`, never implicitly; opening one that is behind raises StoreUnavailable,
    as does a Postgres DSN without psycopg (the `postgres` extra), naming what to install."""
    if dsn and is_postgres(dsn):
        try:
            from scheduler.history.store.postgres import PostgresStore
        except MissingExtra as exc:  # no psycopg: a store that cannot open, saying why
            raise StoreUnavailable(str(exc)) from None
        return PostgresStore(dsn)
    if dsn and "://" in dsn and not dsn.startswith("sqlite://"):  # a misspelt scheme
        raise StoreUnavailable(f"{masked(dsn, dsn)[:80]!r} is not a history store: use "
                               f"postgresql://user@host/db, 'host=... dbname=...', or a "
                               f"SQLite file (sqlite:///path)")
    from scheduler.history.store.sqlite import SqliteStore

    read_only = bool(dsn) and dsn.endswith("?mode=ro")  # type: ignore[union-attr]
    if read_only:
        dsn = dsn.removesuffix("?mode=ro")  # type: ignore[union-attr]
    if dsn and dsn.startswith("sqlite://"):
        path = Path(dsn.removeprefix("sqlite://"))  # sqlite:///var/lib/x.db -> /var/lib/x.db
    else:
        path = Path(dsn) if dsn else DEFAULT_SQLITE_PATH
    store = SqliteStore(path, read_only=read_only)
    if not read_only:
        store.upgrade()
    return store
