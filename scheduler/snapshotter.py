"""Copies slot and job state into the history store (`sched snapshotter`).

Events only say WHICH slots changed: each batch reads the events of every shard through the
consumer group `history`, fetches the current slot hashes (and job hashes, for submissions)
in one pipelined round trip, writes rows in one store transaction, and only then acks the
events, schedules the terminal slots for removal from Redis (`retain`), and trims the acked
head of each events stream. A crash between commit and ack replays the batch, which the
versioned upserts make a no-op. Several snapshotters share the group; entries a dead one left
pending are taken over with XAUTOCLAIM once idle for `claim_idle_s`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import redis.asyncio

from . import scripts
from .clock import Clock, RedisClock
from .errors import ConfigError, NamespaceError
from .keys import HISTORY_GROUP, Keys
from .loops import pause
from .store import Batch, HistoryStore, event_slot_row, is_terminal, job_row, slot_rows

log = logging.getLogger("scheduler.snapshotter")

# Event types that only move slots; any other type (submissions, and whatever a newer version
# adds) also makes the snapshotter copy the job definition.
SLOT_ONLY = frozenset({
    "claimed", "succeeded", "retry", "dead", "cancelled", "cancel_requested", "refused",
    "released", "lost", "reclaimed", "redispatched", "replayed", "purged", "queued",
    "recovered"})


class SnapshotterConfig(msgspec.Struct, kw_only=True, frozen=True):
    read_count: int = 20
    """Events entries per shard per batch (one entry holds a whole Lua batch of records)."""
    claim_idle_s: float = 30.0
    """Pending entries idle this long belong to a dead snapshotter and are taken over."""
    idle_sleep_s: float = 0.2
    retention_s: float | None = 3600.0
    """How long a finished slot stays in Redis once it is in the store; None keeps it."""
    consumer: str = ""
    overlap_writes: bool = True
    """Write batch N to the store while reading batch N+1 from Redis (acks still follow each
    commit)."""

    def __post_init__(self) -> None:
        if self.read_count < 1:
            raise ConfigError(f"read_count must be >= 1, not {self.read_count}")
        if self.claim_idle_s <= 0:
            raise ConfigError(f"claim_idle_s must be > 0, not {self.claim_idle_s}")
        if self.retention_s is not None and self.retention_s < 0:
            raise ConfigError(f"retention_s must be >= 0 or None, not {self.retention_s}")


READ_CHUNK = 2000  # hashes per history_read call: bounds how long one call holds Redis


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _version(entry_id: bytes | str) -> int:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms) * 1_000_000 + int(seq or 0)


class _Work:
    """What one batch touches in one shard."""

    __slots__ = ("ids", "slots", "jobs")

    def __init__(self) -> None:
        self.ids: list[bytes] = []
        self.slots: dict[str, tuple[str, dict[str, Any]]] = {}  # slot -> (event type, record)
        self.jobs: set[str] = set()


class Snapshotter:
    def __init__(self, client: redis.asyncio.Redis, store: HistoryStore, *,
                 namespace: str = "sched", config: SnapshotterConfig | None = None,
                 clock: Clock | None = None) -> None:
        self.redis = client
        self.store = store
        self.keys = Keys(namespace)
        self.namespace = namespace
        self.config = config or SnapshotterConfig()
        self.consumer = self.config.consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.clock = clock or RedisClock()
        self.shards = 0
        self.events = 0  # entries written and acked
        self.rows = 0
        self._cursors: dict[int, bytes] = {}
        self._last_claim = 0.0
        self._own_pending = True  # at start and after a failed batch: re-read our own first
        self._inflight: tuple[asyncio.Task[None], dict[int, _Work],
                              list[tuple[int, str, int]], int] | None = None
        self._stop = asyncio.Event()

    async def setup(self) -> None:
        shards = await self.redis.hget(self.keys.meta, "shards")
        if not shards:
            raise NamespaceError(f"namespace {self.namespace!r} has no shard count in Redis yet "
                                 f"(nothing was submitted, or Redis lost it: run `sched recover`)")
        self.shards = int(shards)
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.shards):
            pipe.xgroup_create(self.keys.events(shard), HISTORY_GROUP, id="0", mkstream=True)
        for result in await pipe.execute(raise_on_error=False):
            if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                raise result
        await self._sync_clock()
        await asyncio.to_thread(self.store.put_namespace, self.namespace, self.shards,
                                self.clock.now_ms())

    async def _sync_clock(self) -> None:
        if self.clock.stale():
            self.clock.anchor(await self.redis.time())

    # --- one batch ---------------------------------------------------------------------

    async def _read(self) -> dict[int, _Work]:
        pipe = self.redis.pipeline(transaction=False)
        start = "0" if self._own_pending else ">"
        for shard in range(self.shards):
            pipe.xreadgroup(HISTORY_GROUP, self.consumer, {self.keys.events(shard): start},
                            count=self.config.read_count)
        claim = time.monotonic() - self._last_claim >= self.config.claim_idle_s / 2
        if claim:
            self._last_claim = time.monotonic()
            for shard in range(self.shards):
                pipe.xautoclaim(self.keys.events(shard), HISTORY_GROUP, self.consumer,
                                int(self.config.claim_idle_s * 1000),
                                self._cursors.get(shard, b"0-0"), count=self.config.read_count)
        replies = await pipe.execute()
        work: dict[int, _Work] = {}
        for shard, reply in enumerate(replies[:self.shards]):
            for _, entries in reply or []:
                self._take(work, shard, entries)
        if claim:
            for shard, (cursor, entries, *deleted) in enumerate(replies[self.shards:]):
                self._cursors[shard] = cursor
                self._take(work, shard, entries)
                gone = deleted[0] if deleted else []
                if gone:
                    # Trimmed by the stream's MAXLEN before anyone wrote them: those events are
                    # lost to history (the slots' later events still bring their state).
                    log.warning("shard %d: %d pending events were trimmed unread", shard,
                                len(gone))
                    work.setdefault(shard, _Work()).ids.extend(gone)
        return work

    def _take(self, work: dict[int, _Work], shard: int,
              entries: Sequence[tuple[bytes, dict[bytes, bytes]]]) -> None:
        w = work.setdefault(shard, _Work())
        for entry_id, fields in entries:
            w.ids.append(entry_id)
            if not fields:
                continue
            kind = fields.get(b"type", b"").decode()
            try:
                records = json.loads(fields.get(b"data") or b"[]")
            except ValueError:
                log.error("shard %d: event %s has unreadable data; skipped", shard, entry_id)
                continue
            for record in records if isinstance(records, list) else []:
                if not isinstance(record, dict):
                    continue
                job = record.get("job")  # submitted and materialized: cron jobs have no slot
                if isinstance(job, str):
                    w.jobs.add(job)
                slot = record.get("slot")
                if not isinstance(slot, str):
                    continue
                w.slots[slot] = (kind, record)
                if kind not in SLOT_ONLY:
                    w.jobs.add(slot.rpartition(":")[0])

    async def _fetch(self, work: dict[int, _Work]) -> tuple[Batch, list[tuple[int, str, int]]]:
        """Read the hashes, one script call per shard (chunked), all in one round trip. The
        version is read with them, so a row's state is the state at its version."""
        calls, plan = [], []
        for shard, w in work.items():
            slots, jobs = list(w.slots), sorted(w.jobs)
            for i in range(0, max(len(slots), len(jobs), 1), READ_CHUNK):
                part_slots, part_jobs = slots[i:i + READ_CHUNK], jobs[i:i + READ_CHUNK]
                calls.append(scripts.history_read(self.keys.prefix(shard), part_slots,
                                                  part_jobs))
                plan.append((shard, part_slots, part_jobs))
        replies = await scripts.run_async(self.redis, calls)
        batch = Batch(jobs=[], slots=[], attempts=[])
        finished: list[tuple[int, str, int]] = []
        for (shard, slots, jobs), (top, slot_raws, job_raws) in zip(plan, replies, strict=True):
            version = _version(top)
            for slot, flat in zip(slots, slot_raws, strict=True):
                if flat:
                    row, attempts = slot_rows(self.namespace, slot, _pairs(flat), version)
                    batch.slots.append(row)
                    batch.attempts.extend(attempts)
                    if row.finished_ms is not None and is_terminal(row.status):
                        finished.append((shard, slot, row.finished_ms))
                else:
                    kind, record = work[shard].slots[slot]
                    gone = event_slot_row(self.namespace, slot, kind, record)
                    if gone is not None:
                        batch.slots.append(gone)
            for job_id, flat in zip(jobs, job_raws, strict=True):
                if flat:
                    batch.jobs.append(job_row(self.namespace, job_id, _pairs(flat)))
        return batch, finished

    async def run_once(self) -> int:
        """One batch over every shard; returns the number of events entries taken. With
        `overlap_writes` the batch's store write still runs when this returns, overlapping
        the next batch's reads; its acks follow its commit (the next call, or settle())."""
        if not self.shards:
            await self.setup()
        await self._sync_clock()
        if self._own_pending:
            await self.settle()  # "0" re-reads unacked entries: the write in flight's too
        try:
            work = await self._read()
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.shards = 0  # Redis lost the groups (flushed, restored): set up again
            await self._drop_inflight()
            return 0
        if not any(w.ids for w in work.values()):
            await self.settle()
            if self._own_pending:
                self._own_pending = False
                return await self.run_once()
            return 0
        try:
            batch, finished = await self._fetch(work)
            await self.settle()
            write = asyncio.create_task(asyncio.to_thread(self.store.write, batch))
            self._inflight = (write, work, finished, len(batch))
            if not self.config.overlap_writes:
                await self.settle()
        except BaseException:
            self._own_pending = True
            raise
        return sum(len(w.ids) for w in work.values())

    async def settle(self) -> None:
        """Wait for the write in flight, then ack it. A failed write leaves its entries (and
        any read since) pending: they are read again from the group's pending list."""
        if self._inflight is None:
            return
        write, work, finished, rows = self._inflight
        self._inflight = None
        try:
            await write
            await self._after_commit(work, finished)
        except BaseException:
            self._own_pending = True
            raise
        self.events += sum(len(w.ids) for w in work.values())
        self.rows += rows

    async def _drop_inflight(self) -> None:
        if self._inflight is not None:
            write = self._inflight[0]
            self._inflight = None
            await asyncio.gather(write, return_exceptions=True)  # its acks have no group

    async def _after_commit(self, work: dict[int, _Work],
                            finished: list[tuple[int, str, int]]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for shard, w in work.items():
            if w.ids:
                pipe.xack(self.keys.events(shard), HISTORY_GROUP, *w.ids)
        if self.config.retention_s is not None:
            retention_ms = int(self.config.retention_s * 1000)
            by_shard: dict[int, dict[str, int]] = {}
            for shard, slot, finished_ms in finished:
                by_shard.setdefault(shard, {})[slot] = finished_ms + retention_ms
            for shard, members in by_shard.items():
                pipe.zadd(self.keys.retain(shard), members)
        await pipe.execute()
        await scripts.run_async(self.redis, [scripts.trim_history(self.keys.prefix(s))
                                             for s in work])

    # --- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                written = await self.run_once()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("snapshot failed (%s); retrying", exc)
                written = 0
            except NamespaceError as exc:
                log.warning("%s; waiting", exc)
                written = 0
            except Exception:
                log.exception("snapshot failed; the batch stays pending and is retried")
                written = 0
            if not written:
                await pause(self._stop, self.config.idle_sleep_s)
        try:
            await self.settle()  # shutdown: commit and ack the last batch before returning
        except Exception:
            log.exception("the last batch failed; it stays pending and is retried")

    def stop(self) -> None:
        self._stop.set()
