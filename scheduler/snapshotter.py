"""Copies slot and job state into the history store (`sched snapshotter`).

Events only say WHICH slots changed: each batch reads the events of every shard through the
consumer group `history`, fetches the current slot hashes (and job hashes, for submissions)
in one pipelined round trip, writes rows in one store transaction, and only then acks the
events, schedules the terminal slots for removal from Redis (`retain`), and trims the acked
head of each events stream. A crash between commit and ack replays the batch, which the
versioned upserts make a no-op. Several snapshotters share the group; entries a dead one left
pending are taken over with XAUTOCLAIM once idle for `claim_idle_s`.

A hash read at version V (the shard's last events id, read atomically with it) already holds
the effect of every event up to V. So the snapshotter remembers, per slot and per job, the
version of its last read, and skips any later-read event whose id is not above it: a job that
ran its whole life before the snapshotter got to its `submitted` event costs one read and one
row instead of one per event. The memory is bounded (`seen_capacity`); forgetting a slot only
costs a redundant, harmless rewrite. It is cleared whenever a batch fails, because a skip is
only sound once the batch that read the hash commits (acks follow commits in order).

The rows of slots and jobs submitted within the batch, and not written before by this
process, go to the store as new (`Batch.new_*`: Postgres COPYs them without the upsert);
everything else is upserted.

A slot whose `submitted` event comes with no later event of it in the batch, and that is due
within `defer_s` (an immediate job, a delayed one about to run), is held back unread: its
next event (queued, claimed, succeeded...) brings it into a later batch, where it is still
new and is written once, in its later state, instead of twice. One that no event brought back
within `defer_s` (no worker took it) is written then; `flush()`, also run when the
snapshotter stops, writes them all. If the process dies holding some, each is written with
its next event; until then `sched recover` would not know it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import redis.asyncio

from . import namespace, scripts
from .clock import Clock, RedisClock
from .errors import ConfigError, NamespaceError
from .keys import HISTORY_GROUP, Keys
from .loops import Backoff, ErrorLog, pause
from .store import (
    Batch,
    HistoryStore,
    event_slot_row,
    is_terminal,
    job_row,
    slot_rows,
    text_hash,
)

log = logging.getLogger("scheduler.snapshotter")

# Event types that only move slots; any other type (submissions, and whatever a newer version
# adds) also makes the snapshotter copy the job definition.
SLOT_ONLY = frozenset({
    "claimed", "succeeded", "retry", "dead", "cancelled", "cancel_requested", "refused",
    "released", "lost", "reclaimed", "redispatched", "replayed", "purged", "queued",
    "recovered", "skipped", "orphaned"})


class SnapshotterConfig(msgspec.Struct, kw_only=True, frozen=True):
    read_count: int = 100
    """Most events entries per shard per batch (one entry holds a whole Lua batch of records:
    from one to thousands)."""
    batch_records: int = 20_000
    """About how many slots and jobs one batch should hold: the entries read per shard adapt
    (from 1 up to read_count) to keep batches near this size."""
    claim_idle_s: float = 30.0
    """Pending entries idle this long belong to a dead snapshotter and are taken over."""
    idle_sleep_s: float = 0.2
    settle_s: float = 0.5
    """After a batch that reached the head of every events stream, wait this long before the
    next: by then most of the slots it will name have finished, and each costs one read and
    one row instead of one per step. History trails Redis by about this much."""
    retention_s: float | None = 3600.0
    """How long a finished slot stays in Redis once it is in the store; None keeps it."""
    consumer: str = ""
    overlap_writes: bool = True
    """Write batch N to the store while reading batch N+1 from Redis (acks still follow each
    commit)."""
    seen_capacity: int = 250_000
    """Slots and jobs whose last read version is remembered, to skip events that read already
    covered (about 150 bytes each)."""
    defer_s: float = 2.0
    """Hold back a slot whose `submitted` event comes alone and that is due within this long,
    until its next event or this long has passed (see the module docstring); 0 writes at
    once."""

    def __post_init__(self) -> None:
        if self.read_count < 1 or self.batch_records < 1:
            raise ConfigError(f"read_count and batch_records must be >= 1, not "
                              f"{self.read_count} and {self.batch_records}")
        if self.settle_s < 0 or self.idle_sleep_s < 0 or self.defer_s < 0:
            raise ConfigError("settle_s, idle_sleep_s and defer_s must be >= 0")
        if self.claim_idle_s <= 0:
            raise ConfigError(f"claim_idle_s must be > 0, not {self.claim_idle_s}")
        if self.seen_capacity < 0:
            raise ConfigError(f"seen_capacity must be >= 0, not {self.seen_capacity}")
        if self.retention_s is not None and self.retention_s < 0:
            raise ConfigError(f"retention_s must be >= 0 or None, not {self.retention_s}")


class _Record(msgspec.Struct):
    """The fields of an event record the snapshotter uses (the rest are skipped unparsed)."""

    slot: Any = None
    job: Any = None
    task: Any = None
    queue: Any = None
    attempt: Any = None


_records = msgspec.json.Decoder(list[_Record])
READ_CHUNK = 2000  # hashes per history_read call: bounds how long one call holds Redis
# Most slots held back at once (defer_s): ~100 bytes each. Past it (a long backlog of
# submissions no worker takes), slots are written at once.
DEFER_MAX = 200_000


def _fire_ms(slot_id: str) -> int:
    """A slot id is `<job id>:<fire_ms>`."""
    try:
        return int(slot_id.rpartition(":")[2])
    except ValueError:
        return 0


def _version(entry_id: bytes | str) -> int:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms) * 1_000_000 + int(seq or 0)


class _Work:
    """What one batch touches in one shard."""

    __slots__ = ("ids", "slots", "jobs", "created")

    def __init__(self) -> None:
        self.ids: list[bytes] = []
        self.slots: dict[str, tuple[str, _Record]] = {}  # slot -> (event type, record)
        self.jobs: set[str] = set()
        self.created: set[str] = set()  # slots and "job:" ids whose `submitted` event is here


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
        self._seen: dict[str, int] = {}  # slot id or "job:" + job id -> version last read
        self.caught_up = False  # the last read reached the head of every events stream
        self._count = 1  # entries per shard per read: grows and shrinks with their size
        self.skipped = 0  # event records already covered by an earlier read
        # Slots held back (defer_s) and never written: slot -> (shard, monotonic deadline).
        # Insertion order is deadline order.
        self._deferred: dict[str, tuple[int, float]] = {}
        self.deferred = 0  # slots held back so far

    async def setup(self) -> None:
        # NamespaceMissing until the namespace's first submit creates it (namespace.py)
        self.shards = namespace.parse(self.namespace, await self.redis.hmget(
            self.keys.meta, *namespace.META_FIELDS)).shards
        pipe = self.redis.pipeline(transaction=False)
        namespace.create_groups(pipe, (self.keys.events(s) for s in range(self.shards)),
                                HISTORY_GROUP)
        namespace.check_groups(await pipe.execute(raise_on_error=False))
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
                            count=self._count)
        claim = time.monotonic() - self._last_claim >= self.config.claim_idle_s / 2
        if claim:
            self._last_claim = time.monotonic()
            for shard in range(self.shards):
                pipe.xautoclaim(self.keys.events(shard), HISTORY_GROUP, self.consumer,
                                int(self.config.claim_idle_s * 1000),
                                self._cursors.get(shard, b"0-0"), count=self._count)
        replies = await pipe.execute()
        work: dict[int, _Work] = {}
        self.caught_up = True
        for shard, reply in enumerate(replies[:self.shards]):
            for _, entries in reply or []:
                self._take(work, shard, entries)
                if len(entries) >= self._count:
                    self.caught_up = False
        if claim:
            await self._forget_consumers()
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
        size = sum(len(w.slots) + len(w.jobs) for w in work.values())
        # Held-back slots past their deadline get room even in a full batch, so a backlog of
        # new events cannot keep them waiting.
        room = max(self.config.batch_records // 4, self.config.batch_records - size)
        size += self._take_deferred(work, False, room)
        if size > self.config.batch_records:
            self._count = max(1, self._count // 2)
        elif not self.caught_up and size * 2 < self.config.batch_records:
            self._count = min(self.config.read_count, self._count * 2)
        return work

    def _take_deferred(self, work: dict[int, _Work], everything: bool, limit: int) -> int:
        """Add up to `limit` held-back slots whose deadline passed (or any, oldest first) to
        the batch, as new rows; returns how many."""
        now, taken = time.monotonic(), 0
        while self._deferred and taken < limit:
            slot, (shard, deadline) = next(iter(self._deferred.items()))
            if deadline > now and not everything:
                break
            del self._deferred[slot]
            w = work.setdefault(shard, _Work())
            w.slots.setdefault(slot, ("deferred", _Record(slot=slot)))
            w.created.add(slot)
            taken += 1
        return taken

    async def _forget_consumers(self) -> None:
        """Drop the group's consumers that hold nothing and were idle past `claim_idle_s`
        (snapshotters that exited; their entries were taken over). One holding entries is
        never dropped: that would drop its entries from the group. A live one that was only
        slow is created again by its next read."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.shards):
            pipe.xinfo_consumers(self.keys.events(shard), HISTORY_GROUP)
        idle_ms = self.config.claim_idle_s * 1000
        drop = self.redis.pipeline(transaction=False)
        for shard, consumers in enumerate(await pipe.execute(raise_on_error=False)):
            for c in consumers if isinstance(consumers, list) else []:
                name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
                if name != self.consumer and not c["pending"] and c["idle"] > idle_ms:
                    drop.xgroup_delconsumer(self.keys.events(shard), HISTORY_GROUP, name)
        if len(drop):
            await drop.execute(raise_on_error=False)

    def _take(self, work: dict[int, _Work], shard: int,
              entries: Sequence[tuple[bytes, dict[bytes, bytes]]]) -> None:
        w = work.setdefault(shard, _Work())
        seen = self._seen
        defer = self.config.defer_s > 0
        deferred = self._deferred
        horizon = self.clock.now_ms() + int(self.config.defer_s * 1000)
        deadline = time.monotonic() + self.config.defer_s
        for entry_id, fields in entries:
            w.ids.append(entry_id)
            if not fields:
                continue
            version = _version(entry_id)
            kind = fields.get(b"type", b"").decode()
            try:
                records = _records.decode(fields.get(b"data") or b"[]")
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.error("shard %d: event %s has unreadable data; skipped", shard, entry_id)
                continue
            for record in records:
                job = record.job  # submitted and materialized: cron jobs have no slot
                slot = record.slot
                if isinstance(slot, str):
                    if kind not in SLOT_ONLY and not isinstance(job, str):
                        job = slot.rpartition(":")[0]
                    if seen.get(slot, -1) >= version:
                        self.skipped += 1
                    elif (kind == "submitted" and defer and _fire_ms(slot) <= horizon
                          and len(deferred) < DEFER_MAX):
                        # Due soon: its next event (or the deadline) brings it, still new.
                        # Unread: whatever it did since, a later event of it is unread too.
                        deferred[slot] = (shard, deadline)
                        self.deferred += 1
                    else:
                        w.slots[slot] = (kind, record)
                        if kind == "submitted":
                            w.created.add(slot)
                        elif deferred.pop(slot, None) is not None:
                            w.created.add(slot)  # held back, never written: still new
                if isinstance(job, str) and seen.get("job:" + job, -1) < version:
                    w.jobs.add(job)
                    if kind == "submitted":
                        w.created.add("job:" + job)

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
        batch = Batch(jobs=[], slots=[], attempts=[], new_jobs=[], new_slots=[],
                      new_attempts=[])
        finished: list[tuple[int, str, int]] = []
        seen = self._seen
        for (shard, slots, jobs), (top, slot_raws, job_raws) in zip(plan, replies, strict=True):
            version = _version(top)
            created = work[shard].created
            events = work[shard].slots
            for slot, flat in zip(slots, slot_raws, strict=True):
                # Created by an event of this batch and never written by this process: new,
                # unless this is a replay (after a crash, or another snapshotter's entries).
                fresh = slot in created and slot not in seen
                seen[slot] = version
                if flat:
                    row, attempts = slot_rows(self.namespace, slot, text_hash(flat), version)
                    (batch.new_slots if fresh else batch.slots).append(row)
                    (batch.new_attempts if fresh else batch.attempts).extend(attempts)
                    if row.finished_ms is not None and is_terminal(row.status):
                        finished.append((shard, slot, row.finished_ms))
                else:
                    kind, record = events[slot]
                    gone = event_slot_row(self.namespace, slot, kind, msgspec.structs.asdict(
                        record))
                    if gone is not None:
                        batch.slots.append(gone)
            for job_id, flat in zip(jobs, job_raws, strict=True):
                key = "job:" + job_id
                fresh = key in created and key not in seen
                seen[key] = version
                if flat:
                    (batch.new_jobs if fresh else batch.jobs).append(
                        job_row(self.namespace, job_id, text_hash(flat)))
        self._forget_oldest()
        return batch, finished

    def _forget_oldest(self) -> None:
        excess = len(self._seen) - self.config.seen_capacity
        if excess > 0:  # dicts keep insertion order: drop the oldest tenth past the bound
            for key in list(itertools.islice(self._seen, excess + self.config.seen_capacity
                                             // 10)):
                del self._seen[key]

    def _failed(self) -> None:
        self._own_pending = True
        self._seen.clear()  # what the failed batches read was never committed

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
            self._seen.clear()
            await self._drop_inflight()
            return 0
        if not any(w.ids or w.slots for w in work.values()):
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
            self._failed()
            raise
        # Entries taken; a shard with none had only held-back slots past their deadline.
        return sum(len(w.ids) or len(w.slots) for w in work.values())

    async def flush(self) -> int:
        """Write every held-back slot now (see `defer_s`) and wait for every commit; returns
        how many were written."""
        await self.settle()
        total = 0
        while self._deferred:
            work: dict[int, _Work] = {}
            total += self._take_deferred(work, True, self.config.batch_records)
            batch, finished = await self._fetch(work)  # "deferred" slots are never held again
            await asyncio.to_thread(self.store.write, batch)
            await self._after_commit(work, finished)
            self.rows += len(batch)
        return total

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
            self._failed()
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
        errors = ErrorLog(log, "snapshot (the batch stays pending and is retried)")
        backoff = Backoff(base_s=self.config.idle_sleep_s)
        while not self._stop.is_set():
            try:
                written = await self.run_once()
            except asyncio.CancelledError:
                raise
            except NamespaceError as exc:
                errors.error(exc, "; waiting for the namespace")
                await pause(self._stop, backoff.next())
                continue
            except Exception as exc:
                errors.error(exc)
                await pause(self._stop, backoff.next())
                continue
            backoff.reset()
            errors.ok()
            if not written:
                await pause(self._stop, self.config.idle_sleep_s)
            elif self.caught_up and self.config.settle_s:
                await pause(self._stop, self.config.settle_s)
        try:
            await self.settle()  # shutdown: commit and ack the last batch before returning
            await self.flush()
        except Exception:
            log.exception("the last batch failed; it stays pending and is retried")

    def stop(self) -> None:
        self._stop.set()
