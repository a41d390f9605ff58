"""The Postgres history store: COPY each batch into temp staging tables, then one upsert per
table, in one transaction. Rows the batch marks new are COPYed straight into their tables
instead, which costs Postgres less than the upsert (bench snapshot); if one exists after all (a
replay after a crash, another snapshotter, a forgotten slot), the unique violation rolls the
transaction back and the whole batch is upserted, and the next batches upsert everything
for a while. Slots and attempt_log are partitioned by fire day; the partitions a batch needs
are created before it is written (under an advisory lock, since two snapshotters may need the
same day), and retention drops whole days."""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import scheduler.history.sqlfiles as sqlfiles
from scheduler.core.errors import MissingExtra, StoreUnavailable

try:
    import psycopg
    from psycopg import sql
except ImportError:  # the `postgres` extra; SQLite, the embedded default, needs none
    raise MissingExtra("history on Postgres", "postgres", "psycopg") from None

from scheduler.core.masking import masked, unencoded
from scheduler.core.models import Slot
from scheduler.core.namespace import Meta
from scheduler.history.store.rows import (
    DAY_MS,
    SCHEMA_VERSION,
    Batch,
    Ledger,
    RecoveryJob,
    days_of,
    decode_state,
    slot_from_state,
)

UPSERT_ONLY_BATCHES = 50
_LOCK = 7_301_946_117  # advisory lock id for migrations and partition DDL
_PART = re.compile(r"^(slots|attempts)_d(\d{8})$")
Q = sqlfiles.queries("postgres")
M = sqlfiles.queries("postgres", "migrations.sql")


def unreachable(dsn: str, exc: Exception) -> StoreUnavailable:
    """psycopg's first line, which may quote the DSN (a malformed one whole): masked."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreUnavailable(f"cannot reach Postgres ({masked(first, dsn)}); check "
                            f"--postgres-dsn / SCHED_POSTGRES_DSN")


def _day_name(table: str, day: int) -> str:
    return f"{table}_d{datetime.fromtimestamp(day * 86_400, UTC):%Y%m%d}"


class PostgresStore:
    dialect = "postgres"

    def __init__(self, dsn: str, *, connect_timeout_s: int = 5) -> None:
        self.dsn = dsn
        problem = unencoded(dsn)
        if problem:
            raise StoreUnavailable(f"cannot use the Postgres DSN {masked(dsn, dsn)!r}: {problem}")
        try:
            self.conn = psycopg.connect(dsn, connect_timeout=connect_timeout_s)
        except psycopg.Error as exc:
            raise unreachable(dsn, exc) from None
        self._days: set[int] = set()
        self._staged = False
        self._upsert_only = 0  # batches left that upsert their new rows too
        self.conflicts = 0  # batches whose "new" rows were not all new

    # --- schema ------------------------------------------------------------------------

    def schema_version(self) -> int:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
            row = cur.fetchone()
            if not row or not row[0]:
                return 0
            cur.execute(M["applied"])
            return max((r[0] for r in cur.fetchall()), default=0)

    def upgrade(self) -> int:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            cur.execute(M["create_versions"])
            cur.execute(M["applied"])
            applied = {r[0] for r in cur.fetchall()}
            for version, script in sqlfiles.migrations("postgres"):
                if version not in applied:
                    cur.execute(script.encode())
                    cur.execute(M["record"], {"version": version})
        return self.schema_version()

    def check(self) -> None:
        found = self.schema_version()
        if found < SCHEMA_VERSION:
            raise StoreUnavailable(f"the history schema is at version {found}, this code needs "
                                   f"{SCHEMA_VERSION}: run `sched db upgrade` first")

    # --- writing -----------------------------------------------------------------------

    def _ensure_partitions(self, days: set[int]) -> None:
        missing = days - self._days
        if not missing:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            for day in sorted(missing):
                cur.execute(sql.SQL(Q["create_partition"]).format(
                    slots_part=sql.Identifier(_day_name("slots", day)),
                    attempts_part=sql.Identifier(_day_name("attempts", day)),
                    start=sql.Literal(day * DAY_MS), end=sql.Literal((day + 1) * DAY_MS)))
        self._days |= missing

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        # One day ahead too, so the first rows of tomorrow never wait on DDL.
        days = days_of(batch)
        self._ensure_partitions(days | {d + 1 for d in days})
        try:
            self._write_retrying(batch)
        except psycopg.errors.CheckViolation:
            # Another store's retention dropped a partition this one thought it had.
            self._days.clear()
            self._ensure_partitions(days)
            self._write(batch)
        except psycopg.OperationalError as exc:
            raise unreachable(self.dsn, exc) from None

    def _write_retrying(self, batch: Batch) -> None:
        """Several snapshotters upsert overlapping rows (in key order, which makes deadlocks
        rare); Postgres still rolls one back now and then: that is a retry, not an outage. A
        unique violation means a row marked new existed: the batch is upserted whole."""
        if self._upsert_only:
            self._upsert_only -= 1
            batch = batch.merged()
        for attempt in range(3):
            try:
                self._write(batch)
                return
            except psycopg.errors.UniqueViolation:
                self.conflicts += 1
                self._upsert_only = UPSERT_ONLY_BATCHES
                batch = batch.merged()
            except psycopg.errors.TransactionRollback:
                if attempt == 2:
                    raise
        self._write(batch)  # the third try met a unique violation: the merged batch once more

    def _write(self, batch: Batch) -> None:
        try:
            self._write_once(batch)
        except BaseException:
            self._staged = False  # temp tables created in a rolled-back transaction are gone
            raise

    def _write_once(self, batch: Batch) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            if not self._staged:
                cur.execute(Q["stage"])
                self._staged = True
            for rows, copy in ((batch.new_jobs, "insert_jobs"), (batch.new_slots, "insert_slots"),
                               (batch.new_attempts, "insert_attempts")):
                if rows:
                    with cur.copy(Q[copy]) as out:
                        for row in rows:
                            out.write_row(row)
            for rows, copy, upsert in ((batch.jobs, "copy_jobs", "upsert_jobs"),
                                       (batch.slots, "copy_slots", "upsert_slots"),
                                       (batch.attempts, "copy_attempts", "upsert_attempts")):
                if not rows:
                    continue
                with cur.copy(Q[copy]) as out:
                    for row in rows:
                        out.write_row(row)
                cur.execute(Q[upsert])
            if batch.fires:
                cur.executemany(Q["upsert_fires"], sorted(batch.fires))

    def put_namespace(self, namespace: str, shards: int, now_ms: int,
                      max_payload_bytes: int | None = None) -> None:
        with self.conn.transaction():
            self.conn.execute(Q["put_namespace"],
                              {"namespace": namespace, "shards": shards, "now_ms": now_ms,
                               "max_payload_bytes": max_payload_bytes})

    def get_namespace(self, namespace: str) -> Meta | None:
        with self.conn.transaction():
            row = self.conn.execute(Q["get_namespace"], {"namespace": namespace}).fetchone()
        return Meta(int(row[0]), None if row[1] is None else int(row[1])) if row else None

    # --- reading -----------------------------------------------------------------------

    def _rows(self, query: str, params: dict[str, Any]) -> list[Any]:
        with self.conn.transaction():
            return self.conn.execute(Q[query], params).fetchall()

    def history(self, namespace: str, *, job_id: str | None, status: str | None,
                since_ms: int, until_ms: int, limit: int) -> list[Slot]:
        rows = self._rows("history", {"namespace": namespace, "job_id": job_id,
                                      "status": status, "since_ms": since_ms,
                                      "until_ms": until_ms, "limit": limit})
        return [slot_from_state(j, f, s) for j, f, s in rows]

    def ledger(self, namespace: str, job_id: str, since_ms: int, until_ms: int,
               limit: int) -> Ledger:
        params = {"namespace": namespace, "job_id": job_id, "since_ms": since_ms,
                  "until_ms": until_ms, "limit": limit}
        with self.conn.transaction():  # one snapshot for both
            slots = self.conn.execute(Q["ledger_slots"], params).fetchall()
            entries = self.conn.execute(Q["fire_entries"], params).fetchall()
        return Ledger([(f, decode_state(s)) for f, s in slots], [(f, r) for f, r in entries])

    def recovery_jobs(self, namespace: str) -> list[RecoveryJob]:
        rows = self._rows("recovery_jobs", {"namespace": namespace})
        return [RecoveryJob(j, decode_state(d), k, c, last) for j, d, k, c, last in rows]

    def recovery_slots(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        rows = self._rows("recovery_slots", {"namespace": namespace})
        return [(f"{j}:{f}", decode_state(s)) for j, f, s in rows]

    def slot_states(self, namespace: str, jobs: Collection[str] | None = None
                    ) -> list[tuple[str, dict[str, str]]]:
        rows = (self._rows("slot_states", {"namespace": namespace}) if jobs is None else
                self._rows("slot_states_of", {"namespace": namespace, "jobs": sorted(jobs)}))
        return [(f"{j}:{f}", decode_state(s)) for j, f, s in rows]

    def job_definitions(self, namespace: str, jobs: Collection[str] | None = None
                        ) -> list[tuple[str, dict[str, str]]]:
        rows = (self._rows("job_definitions", {"namespace": namespace}) if jobs is None else
                self._rows("job_definitions_of", {"namespace": namespace, "jobs": sorted(jobs)}))
        return [(j, decode_state(d)) for j, d in rows]

    # --- retention ---------------------------------------------------------------------

    def drop_before(self, cutoff_ms: int) -> None:
        """Drop each day partition that ends at or before the cutoff (no DELETE; the few
        fire ledger entries are deleted)."""
        cutoff_day = datetime.fromtimestamp(cutoff_ms / 1000, UTC).strftime("%Y%m%d")
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            cur.execute(Q["partitions"])
            for (name,) in cur.fetchall():
                m = _PART.match(name)
                if m and m.group(2) < cutoff_day:
                    cur.execute(sql.SQL(Q["drop_partition"]).format(part=sql.Identifier(name)))
            cur.execute(Q["drop_orphan_jobs"], {"cutoff_ms": cutoff_ms})
            cur.execute(Q["drop_fires_before"], {"cutoff_ms": cutoff_ms})
        self._days.clear()

    def close(self) -> None:
        self.conn.close()
