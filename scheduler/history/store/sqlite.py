"""The embedded history store (SQLite, stdlib): the default when no Postgres DSN is given,
for a laptop or a single node. Same tables as Postgres without partitions, so retention here is
a DELETE by fire time. Postgres is what production should use."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any

import scheduler.history.sqlfiles as sqlfiles
from scheduler.core.errors import StoreUnavailable
from scheduler.core.models import Slot
from scheduler.core.namespace import Meta
from scheduler.history.store.rows import (
    Batch,
    Ledger,
    RecoveryJob,
    decode_state,
    slot_from_state,
)

Q = sqlfiles.queries("sqlite")
M = sqlfiles.queries("sqlite", "migrations.sql")


class SqliteStore:
    dialect = "sqlite"

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """`read_only` (what read-only commands open): the file must exist, and nothing is
        created or written."""
        self.path = path
        if read_only:
            if not path.is_file():
                raise StoreUnavailable(f"no history file at {path} yet (nothing was "
                                       f"snapshotted there): run `sched snapshotter`, or "
                                       f"pass --postgres-dsn / --history-file")
            try:
                self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            isolation_level=None, check_same_thread=False,
                                            timeout=30)
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot open the history file {path} ({exc})") from None
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread off: the snapshotter writes from a worker thread; one
            # connection is only ever used by one thread at a time.
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                        timeout=30)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open the history file {path} ({exc})") from None

    def _tx(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def _commit(self, ok: bool) -> None:
        self.conn.execute("COMMIT" if ok else "ROLLBACK")

    def _run(self, fn: Any) -> Any:
        self._tx()
        try:
            out = fn(self.conn)
        except BaseException:
            self._commit(False)
            raise
        self._commit(True)
        return out

    def schema_version(self) -> int:
        self.conn.execute(M["create_versions"])
        return max((r[0] for r in self.conn.execute(M["applied"])), default=0)

    def upgrade(self) -> int:
        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(M["create_versions"])
            applied = {r[0] for r in conn.execute(M["applied"])}
            for version, script in sqlfiles.migrations("sqlite"):
                if version not in applied:
                    for statement in script.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(M["record"], {"version": version})

        self._run(apply)
        return self.schema_version()

    def check(self) -> None:
        pass  # migrated on open

    def write(self, batch: Batch) -> None:
        batch = batch.merged()  # SQLite upserts are cheap enough: one path
        if not len(batch):
            return

        def put(conn: sqlite3.Connection) -> None:
            conn.executemany(Q["upsert_jobs"], batch.jobs)
            conn.executemany(Q["upsert_slots"], batch.slots)
            conn.executemany(Q["upsert_attempts"], batch.attempts)
            conn.executemany(Q["upsert_fires"], batch.fires)

        self._run(put)

    def put_namespace(self, namespace: str, shards: int, now_ms: int,
                      max_payload_bytes: int | None = None) -> None:
        self._run(lambda c: c.execute(Q["put_namespace"], {
            "namespace": namespace, "shards": shards, "now_ms": now_ms,
            "max_payload_bytes": max_payload_bytes}))

    def get_namespace(self, namespace: str) -> Meta | None:
        row = self.conn.execute(Q["get_namespace"], {"namespace": namespace}).fetchone()
        return Meta(int(row[0]), None if row[1] is None else int(row[1])) if row else None

    def history(self, namespace: str, *, job_id: str | None, status: str | None,
                since_ms: int, until_ms: int, limit: int) -> list[Slot]:
        rows = self.conn.execute(Q["history"], {
            "namespace": namespace, "job_id": job_id, "status": status, "since_ms": since_ms,
            "until_ms": until_ms, "limit": limit}).fetchall()
        return [slot_from_state(j, f, s) for j, f, s in rows]

    def ledger(self, namespace: str, job_id: str, since_ms: int, until_ms: int,
               limit: int) -> Ledger:
        params = {"namespace": namespace, "job_id": job_id, "since_ms": since_ms,
                  "until_ms": until_ms, "limit": limit}
        slots = self.conn.execute(Q["ledger_slots"], params).fetchall()
        entries = self.conn.execute(Q["fire_entries"], params).fetchall()
        return Ledger([(f, decode_state(s)) for f, s in slots], [(f, r) for f, r in entries])

    def recovery_jobs(self, namespace: str) -> list[RecoveryJob]:
        rows = self.conn.execute(Q["recovery_jobs"], {"namespace": namespace}).fetchall()
        return [RecoveryJob(j, decode_state(d), k, c, last) for j, d, k, c, last in rows]

    def recovery_slots(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        rows = self.conn.execute(Q["recovery_slots"], {"namespace": namespace}).fetchall()
        return [(f"{j}:{f}", decode_state(s)) for j, f, s in rows]

    def slot_states(self, namespace: str, jobs: Collection[str] | None = None
                    ) -> list[tuple[str, dict[str, str]]]:
        rows = self._select("slot_states", namespace, jobs)
        return [(f"{j}:{f}", decode_state(s)) for j, f, s in rows]

    def job_definitions(self, namespace: str, jobs: Collection[str] | None = None
                        ) -> list[tuple[str, dict[str, str]]]:
        rows = self._select("job_definitions", namespace, jobs)
        return [(j, decode_state(d)) for j, d in rows]

    def _select(self, query: str, namespace: str, jobs: Collection[str] | None) -> list[Any]:
        """The namespace's rows, or those of `jobs` alone (passed as one JSON array: no
        limit on how many, as SQLite has on bound parameters)."""
        if jobs is None:
            return self.conn.execute(Q[query], {"namespace": namespace}).fetchall()
        return self.conn.execute(Q[f"{query}_of"], {"namespace": namespace,
                                                    "jobs": json.dumps(sorted(jobs))}).fetchall()

    def drop_before(self, cutoff_ms: int) -> None:
        def drop(conn: sqlite3.Connection) -> None:
            for name in ("drop_attempts_before", "drop_slots_before", "drop_orphan_jobs",
                         "drop_fires_before"):
                conn.execute(Q[name], {"cutoff_ms": cutoff_ms})

        self._run(drop)

    def close(self) -> None:
        self.conn.close()
