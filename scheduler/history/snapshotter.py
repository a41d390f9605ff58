"""Copies slot and job state into the history store (`sched snapshotter`).

Events only say WHICH slots changed: each batch reads the events of every shard through the
consumer group `history`, fetches the current slot hashes (and job hashes, for submissions)
in one round trip (reads.py), writes rows in one store transaction, and only then acks the
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

A `not_run` event carries the fire ledger entries its script wrote (scheduler/core/ledger.py):
they are copied from the event itself, with no read, into the store's `fire_entries`.

A slot whose `submitted` event comes with no later event of it in the batch, and that is due
within `defer_s` (an immediate job, a delayed one about to run), is held back unread: its
next event (claimed, succeeded...) brings it into a later batch, where it is still new and
is written once, in its later state, instead of twice. A `queued` event (promoted early,
still due within `defer_s`) leaves it held, its deadline renewed: its claim follows at its
fire time. One that no event brought back
within `defer_s` (no worker took it) is written then; `flush()`, also run when the
snapshotter stops, writes them all. If the process dies holding some, each is written with
its next event; until then `sched recover` would not know it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

import msgspec
import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.history.reads as hash_read
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import HISTORY_GROUP, Keys
from scheduler.history.intake import Intake, SnapshotterConfig, Work, version_of
from scheduler.history.store import (
    Batch,
    FireRow,
    HistoryStore,
    event_slot_row,
    is_terminal,
    job_row,
    slot_rows,
    text_hash,
)
from scheduler.redis.clock import Clock, RedisClock, resync
from scheduler.redis.service import Backoff, Service

log = logging.getLogger("scheduler.history.snapshotter")
READ_CHUNK = 2000  # hashes per MULTI (reads.py): bounds how long one holds Redis

class Snapshotter(Service):
    what = "snapshot (the batch stays pending and is retried)"
    log = log

    def __init__(self, client: redis.asyncio.Redis, store: HistoryStore, *,
                 namespace: str = "sched", config: SnapshotterConfig | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__()
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
        self._reported = 0  # rows at the last progress line
        self._cursors: dict[int, bytes] = {}
        self._last_claim = 0.0
        self._claim_more = False  # the last claim took a full page: claim again next batch
        self._own_pending = True  # at start and after a failed batch: re-read our own first
        self._inflight: tuple[asyncio.Task[None], dict[int, Work],
                              list[tuple[int, str, int]], int] | None = None
        self.intake = Intake(self.config, self.clock)
        self.caught_up = False  # the last read reached the head of every events stream
        self._count = 1  # entries per shard per read: grows and shrinks with their size

    async def setup(self) -> None:
        # NamespaceMissing until the namespace's first submit creates it (namespace.py)
        meta = namespace.parse(self.namespace, await transport.call(
            self.redis, "hmget", self.keys.meta, *namespace.META_FIELDS))
        self.shards = meta.shards
        pipe = transport.pipeline(self.redis)
        namespace.create_groups(pipe, (self.keys.events(s) for s in range(self.shards)),
                                HISTORY_GROUP)
        namespace.check_groups(await transport.send(pipe, raise_on_error=False))
        await resync(self.clock, self.redis)
        await asyncio.to_thread(self.store.put_namespace, self.namespace, self.shards,
                                self.clock.now_ms(), meta.max_payload_bytes)

    # --- one batch ---------------------------------------------------------------------

    async def _read(self) -> dict[int, Work]:
        pipe = transport.pipeline(self.redis)
        start = "0" if self._own_pending else ">"
        for shard in range(self.shards):
            pipe.xreadgroup(HISTORY_GROUP, self.consumer, {self.keys.events(shard): start},
                            count=self._count)
        claim = (self._claim_more
                 or time.monotonic() - self._last_claim >= self.config.claim_idle_s / 2)
        if claim:
            self._last_claim = time.monotonic()
            for shard in range(self.shards):
                pipe.xautoclaim(self.keys.events(shard), HISTORY_GROUP, self.consumer,
                                int(self.config.claim_idle_s * 1000),
                                self._cursors.get(shard, b"0-0"), count=self._count)
        replies = await transport.send(pipe)
        work: dict[int, Work] = {}
        self.caught_up = True
        for shard, reply in enumerate(replies[:self.shards]):
            for _, entries in reply or []:
                self.intake.take(work, shard, entries)
                if len(entries) >= self._count:
                    self.caught_up = False
        if claim:
            await self._forget_consumers()
            self._took_over(work, replies[self.shards:])
        size = sum(len(w.slots) + len(w.jobs) for w in work.values())
        # Held-back slots past their deadline get room even in a full batch, so a backlog of
        # new events cannot keep them waiting.
        room = max(self.config.batch_records // 4, self.config.batch_records - size)
        size += self.intake.take_deferred(work, False, room)
        if size > self.config.batch_records:
            self._count = max(1, self._count // 2)
        elif not self.caught_up and size * 2 < self.config.batch_records:
            self._count = min(self.config.read_count, self._count * 2)
        return work

    def _took_over(self, work: dict[int, Work], replies: list[Any]) -> None:
        """Add the entries XAUTOCLAIM took from dead snapshotters (one reply per shard)."""
        self._claim_more = False
        for shard, (cursor, entries, *deleted) in enumerate(replies):
            self._cursors[shard] = cursor
            self.intake.take(work, shard, entries)
            if len(entries) >= self._count:
                # More may wait behind these: take them in the next batches, growing as reads
                # do, not a page per shard every claim_idle_s / 2 (minutes behind after a
                # crash at the default 30 s).
                self.caught_up = False
                self._claim_more = True
            gone = deleted[0] if deleted else []
            if gone:
                # Trimmed by the stream's MAXLEN before anyone wrote them: those events are
                # lost to history (the slots' later events still bring their state).
                log.warning("shard %d: %d pending events were trimmed unread", shard,
                            len(gone))
                work.setdefault(shard, Work()).ids.extend(gone)

    async def _forget_consumers(self) -> None:
        """Drop the group's consumers that hold nothing and were idle past `claim_idle_s`
        (snapshotters that exited; their entries were taken over). One holding entries is
        never dropped: that would drop its entries from the group. A live one that was only
        slow is created again by its next read."""
        pipe = transport.pipeline(self.redis)
        for shard in range(self.shards):
            pipe.xinfo_consumers(self.keys.events(shard), HISTORY_GROUP)
        idle_ms = self.config.claim_idle_s * 1000
        drop = transport.pipeline(self.redis)
        for shard, consumers in enumerate(await transport.send(pipe, raise_on_error=False)):
            for c in consumers if isinstance(consumers, list) else []:
                name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
                if name != self.consumer and not c["pending"] and c["idle"] > idle_ms:
                    drop.xgroup_delconsumer(self.keys.events(shard), HISTORY_GROUP, name)
        if len(drop):
            await transport.send(drop, raise_on_error=False)

    async def _fetch(self, work: dict[int, Work]) -> tuple[Batch, list[tuple[int, str, int]]]:
        """Read the hashes, one MULTI per shard (chunked), all in one round trip per node
        (reads.py). The version is read with them, so a row's state is the state at its
        version."""
        reads, plan = [], []
        for shard, w in work.items():
            slots, jobs = list(w.slots), sorted(w.jobs)
            for i in range(0, max(len(slots), len(jobs), 1), READ_CHUNK):
                reads.append(hash_read.Read(self.keys.prefix(shard), slots[i:i + READ_CHUNK],
                                            jobs[i:i + READ_CHUNK]))
                plan.append(shard)
        states = await hash_read.read(self.redis, reads)
        batch = Batch(jobs=[], slots=[], attempts=[], new_jobs=[], new_slots=[],
                      new_attempts=[], fires=[])
        finished: list[tuple[int, str, int]] = []
        seen = self.intake.seen
        for shard, r, state in zip(plan, reads, states, strict=True):
            version = version_of(state.top)
            created = work[shard].created
            events = work[shard].slots
            for slot, flat in zip(r.slots, state.slots, strict=True):
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
            for job_id, flat in zip(r.jobs, state.jobs, strict=True):
                key = "job:" + job_id
                fresh = key in created and key not in seen
                seen[key] = version
                if flat:
                    (batch.new_jobs if fresh else batch.jobs).append(
                        job_row(self.namespace, job_id, text_hash(flat)))
        for w in work.values():
            batch.fires.extend(FireRow(self.namespace, job, fire, reason)
                               for job, fire, reason in w.fires)
        self.intake.forget_oldest()
        return batch, finished

    def _failed(self) -> None:
        self._own_pending = True
        self.intake.seen.clear()  # what the failed batches read was never committed

    async def run_once(self) -> int:
        """One batch over every shard; returns the number of events entries taken. With
        `overlap_writes` the batch's store write still runs when this returns, overlapping
        the next batch's reads; its acks follow its commit (the next call, or settle())."""
        if not self.shards:
            await self.setup()
        await resync(self.clock, self.redis)
        if self._own_pending:
            await self.settle()  # "0" re-reads unacked entries: the write in flight's too
        try:
            work = await self._read()
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.shards = 0  # Redis lost the groups (flushed, restored): set up again
            self.intake.seen.clear()
            await self._drop_inflight()
            return 0
        if not any(w.ids or w.slots or w.fires for w in work.values()):
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
        while self.intake.held:
            work: dict[int, Work] = {}
            total += self.intake.take_deferred(work, True, self.config.batch_records)
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

    async def _after_commit(self, work: dict[int, Work],
                            finished: list[tuple[int, str, int]]) -> None:
        pipe = transport.pipeline(self.redis)
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
        await transport.send(pipe)
        await scripts.run_async(self.redis, [scripts.trim_history(self.keys.prefix(s))
                                             for s in work])

    # --- the loop ----------------------------------------------------------------------

    def delay(self, written: int) -> float:
        if not written:
            return self.config.idle_sleep_s
        return self.config.settle_s if self.caught_up else 0.0

    async def run(self) -> None:
        """Batches until stop() (service.Service), then the last one committed and every
        held-back slot written."""
        self.backoff = Backoff(base_s=self.config.idle_sleep_s)
        log.info("snapshotter %s started (namespace %s)", self.consumer, self.keys.ns)
        hash_read.start(self.redis)  # its reads on connections of their own
        try:
            await super().run()
            try:
                await self.settle()  # shutdown: commit and ack the last batch before returning
                await self.flush()
            except Exception:
                log.exception("the last batch failed; it stays pending and is retried")
        finally:
            await hash_read.stop(self.redis)
        log.info("snapshotter %s stopped (%d row(s) written)", self.consumer, self.rows)

    def progress(self) -> str | None:
        n, self._reported = self.rows - self._reported, self.rows
        return f"snapshotter {self.consumer}: {n:,} row(s) written in the last " \
               f"{self.progress_every_s:.0f}s ({self.rows:,} in all)"

    @property
    def skipped(self) -> int:
        """Event records skipped: an earlier read already covered them."""
        return self.intake.skipped

    @property
    def deferred(self) -> int:
        """Slots held back so far (defer_s)."""
        return self.intake.deferred

