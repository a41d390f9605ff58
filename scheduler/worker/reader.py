"""A worker's side of its dispatch streams: which streams it reads, what it read but has not
claimed yet (the backlog), and taking back what a lost reply handed it.

One `Reader` per worker, shared by its claim pipelines (worker.py): every pipeline takes
from the same backlog, so a read of one pipeline feeds the others. A worker reads every lane
(one stream per priority, keys.lanes) of its queues; the backlog hands entries out by
priority (backlog.py has the rule).

Entries dispatched early (promote.lua: field `f`, the time the slot may start) are held apart,
in time order, until the worker's Redis clock reaches it, then join the backlog: a burst due
at one instant is read before it and costs only its claims then. At most `hold_cap` are held
(read ahead beyond that, the rest wait in their streams for whichever worker is free at the
instant); a blocking read never blocks past the earliest held time.

On a single Redis one XREADGROUP reads every stream. On a Redis Cluster a read may name the
streams of one hash tag only, so each shard has its own read in flight (`per_shard`), sent to
its node over a plain connection (no COMMAND GETKEYS), blocking while the shard is idle; a
read returns when the first of them brings entries or times out, the others go on and add
what they bring to the backlog when they end.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import DISPATCH_GROUP, PRIORITIES, Keys, lane
from scheduler.redis.clock import Clock, RedisClock
from scheduler.worker.backlog import Backlog, Entry

log = logging.getLogger("scheduler.worker.worker")

SHARP_MS = 100  # how long before a held entry's time reads stop blocking
POLL_MS = 5  # ...and how often they look meanwhile


class Reader:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, consumer: str, batch: int,
                 events_maxlen: int, clock: Clock | None = None, hold_cap: int = 0) -> None:
        self.redis = client
        self.clock = clock or RedisClock()
        self.hold_cap = max(batch, hold_cap)
        # Entries dispatched early: (not before ms, arrival, entry), a heap.
        self.early: list[tuple[int, int, Entry]] = []
        self._arrivals = 0
        self.keys = keys
        self.consumer = consumer
        self.batch = batch
        self.events_maxlen = events_maxlen
        self.streams: list[tuple[bytes, int, str]] = []  # (stream key, shard, lane)
        self._per_priority = 1  # streams of one priority: a read's COUNT is shared by these
        self._read_tail: tuple[Any, ...] = ()  # XREADGROUP's STREAMS key... id...
        self._stream_of: dict[bytes, tuple[int, str, deque[Entry]]] = {}
        self.backlog = Backlog()
        # The job fields entries in hand carry (slot id -> t, p, o, d of the newest entry read
        # for it: carry_entry in _lib.lua; entry ids repeat across streams, slot ids do not),
        # for claims that read no job hash. Only a shortcut: an entry without (or forgotten,
        # past the cap) is claimed with the job read.
        self.carried: dict[str, tuple[bytes, bytes, bytes, bytes]] = {}
        self.carry_cap = 4 * (self.hold_cap + batch)
        # A read or claim whose reply was lost may have handed this consumer entries it never
        # saw: the next read first looks at its own pending list (see recover).
        self.must_recover = False
        self.per_shard = cluster.is_cluster(client)
        self._reads: dict[int, asyncio.Task[Any]] = {}  # per_shard: shard -> read in flight
        self._shard_tail: dict[int, tuple[Any, ...]] = {}  # per_shard: STREAMS ... of a shard

    async def open(self, shards: int, queues: Iterable[str]) -> None:
        """Read every lane of these queues over every shard; make sure each stream has the
        group."""
        queues = list(queues)
        self.streams = [(self.keys.queue(s, q, p).encode(), s, lane(q, p)) for q in queues
                        for p in PRIORITIES for s in range(shards)]
        for q in queues:
            for p in PRIORITIES:
                self.backlog.know(lane(q, p), p)
        self._per_priority = max(1, len(self.streams) // len(PRIORITIES))
        self._read_tail = ("STREAMS", *(key for key, _, _ in self.streams),
                           *(">" for _ in self.streams))
        # Streams read before keep their place: a read sent before this call may still bring
        # their entries (a queue that just became limited: the claim refuses them, LIMITED,
        # and they go back to their stream rather than sit unseen in this consumer's hands).
        self._stream_of = {**self._stream_of,
                           **{key: (shard, lane_name, self.backlog.lane(lane_name))
                              for key, shard, lane_name in self.streams}}
        for shard in range(shards):
            keys = [key for key, s, _ in self.streams if s == shard]
            self._shard_tail[shard] = ("STREAMS", *keys, *(">" for _ in keys))
        await self.create_groups()

    async def create_groups(self) -> None:
        pipe = transport.pipeline(self.redis)
        namespace.create_groups(pipe, (key for key, _, _ in self.streams), DISPATCH_GROUP)
        namespace.check_groups(await transport.send(pipe, raise_on_error=False))

    async def read(self, free: int, block_ms: int | None) -> None:
        """One XREADGROUP over every stream. COUNT applies per stream, so a read may bring
        more entries than there are free run slots: the rest wait in `backlog`, unclaimed
        (no lease runs down), and are claimed as runs finish. COUNT is shared among the
        streams of one priority, not all of them: a namespace using one priority must read
        as much per call as it did before lanes."""
        if not self.streams:  # every queue of the worker is limited: limiter.py reads them
            await asyncio.sleep((block_ms or 0) / 1000)
            return
        if self.early and block_ms is not None:
            wait = self.early[0][0] - self.clock.now_ms()
            if len(self.early) >= self.hold_cap:  # held enough: wait for their time instead
                await asyncio.sleep(max(0, min(wait, block_ms)) / 1000)
                return
            if wait <= SHARP_MS:
                pause = max(0, min(wait, POLL_MS)) / 1000
                if self.per_shard:
                    # Shard reads run beside the pass: each shard keeps one in flight (it
                    # answers as soon as the shard has an entry), and the pass comes back by
                    # the held entry's time. Skipping them here left the shards unread for
                    # as long as held entries kept falling due (a run of delayed jobs).
                    return await self._read_shards(self._count(free), block_ms, pause)
                # Redis ends a BLOCK on its own timer (every 100 ms when idle): the last
                # stretch is polled, so the held entries start on time.
                await self.read(free, None)
                await asyncio.sleep(pause)
                return
            block_ms = min(block_ms, wait - SHARP_MS)
        count = self._count(free)
        if self.per_shard:
            return await self._read_shards(
                count, block_ms, block_ms / 1000 if self.early and block_ms is not None
                else None)
        try:
            reply: Any = await transport.command(self.redis, *self._xreadgroup(count, block_ms))
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.create_groups()
            return
        except BaseException:
            self.must_recover = True
            raise
        self.add(reply)

    def _count(self, free: int) -> int:
        """A read's COUNT with `free` run slots: shared among the streams of one priority."""
        return -(-min(self.batch, free) // self._per_priority)

    async def _read_shards(self, count: int, block_ms: int | None,
                           timeout_s: float | None) -> None:
        """Start a read on every shard that has none in flight, and wait for the first to
        end, at most `timeout_s` (None: no limit)."""
        for shard, tail in self._shard_tail.items():
            if shard not in self._reads:
                self._reads[shard] = asyncio.create_task(self._read_shard(shard, tail, count,
                                                                          block_ms))
        # Reads in flight keep their first block: while entries are held for their time,
        # wait for those reads no longer than the time asks (they stay in flight).
        done, _ = await asyncio.wait(list(self._reads.values()), timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        self._harvest(done)

    async def _read_shard(self, shard: int, tail: tuple[Any, ...], count: int,
                          block_ms: int | None) -> Any:
        node = cluster.node_client(self.redis, tail[1])
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        try:
            return await transport.command(node, "XREADGROUP GROUP", DISPATCH_GROUP,
                                           self.consumer, "COUNT", count, *block, *tail)
        except redis.exceptions.ResponseError as exc:
            if isinstance(exc, cluster.ELSEWHERE):  # the slot moved: read it there next time
                await cluster.refresh_async(self.redis, force=True)
                return None
            if "NOGROUP" not in str(exc):
                raise
            await self.create_groups()
            return None
        except BaseException:
            cluster.mark_stale(self.redis)
            raise

    def _harvest(self, done: Collection[asyncio.Task[Any]]) -> None:
        """Add what the finished shard reads brought; a failed one raises (after the rest are
        in) and means entries may have been delivered unseen (must_recover)."""
        failed: BaseException | None = None
        for shard, task in list(self._reads.items()):
            if task not in done:
                continue
            del self._reads[shard]
            if task.cancelled():
                self.must_recover = True
            elif task.exception() is not None:
                self.must_recover = True
                failed = failed or task.exception()
            else:
                self.add(task.result())
        if failed is not None:
            raise failed

    async def settle(self) -> None:
        """Wait for the shard reads in flight (at most a block) and keep what they bring, so
        that a stopping worker hands it back instead of leaving it pending."""
        if self._reads:
            done, _ = await asyncio.wait(list(self._reads.values()))
            try:
                self._harvest(done)
            except Exception as exc:
                log.warning("a read in flight at shutdown failed (%s); what it took is "
                            "reclaimed after the lease", exc)

    async def recover(self, known: Collection[str]) -> None:
        """Take back entries delivered to this consumer whose reply never arrived: this
        consumer's own pending list (XREADGROUP ... 0), minus the slots in `known` (runs in
        flight, outcomes waiting to be committed, runs given up on) and those in the backlog.
        Claiming any of them again is safe (claim.lua grants this worker's own claims again,
        and refuses the rest)."""
        if not self.streams:
            self.must_recover = False
            return
        if self.per_shard:
            pipe = transport.pipeline(self.redis)
            for tail in self._shard_tail.values():
                pipe.execute_command("XREADGROUP GROUP", DISPATCH_GROUP, self.consumer,
                                     "COUNT", self.batch, "STREAMS", *_from_start(tail))
            replies = await transport.send(pipe)
            reply: Any = [pair for r in replies for pair in _pairs(r)]
        else:
            reply = await transport.command(self.redis,
                                            *self._xreadgroup(self.batch, None, start="0"))
        self.must_recover = False
        before = len(self.backlog) + len(self.early)
        self.add(reply, skip={slot for _, _, _, slot in self.backlog}
                 | {entry[3] for _, _, entry in self.early} | set(known))
        if len(self.backlog) + len(self.early) > before:
            log.warning("took back %d entries whose read or claim reply was lost",
                        len(self.backlog) + len(self.early) - before)

    def ready(self) -> bool:
        """Whether entries wait to be claimed now (held ones whose time came join them)."""
        if self.early:
            self._release(self.clock.now_ms())
        return bool(self.backlog)

    def take(self, n: int) -> list[Entry]:
        if self.early:
            self._release(self.clock.now_ms())
        return self.backlog.take(n)

    def in_hand(self) -> int:
        """Entries read and not claimed: the backlog and those held for their time."""
        return len(self.backlog) + len(self.early)

    def hold(self, entry: Entry, not_before_ms: int) -> None:
        """An entry not to claim before this time (claim.lua answered EARLY)."""
        self._arrivals += 1
        heapq.heappush(self.early, (not_before_ms, self._arrivals, entry))

    def _release(self, now_ms: int) -> None:
        """Held entries whose time came join the backlog, two batches' worth at a time: at
        a burst's instant the first claim goes out without waiting for the whole heap."""
        early, room = self.early, 2 * self.batch - len(self.backlog)
        while room > 0 and early and early[0][0] <= now_ms:
            entry = heapq.heappop(early)[2]
            self.backlog.lane(entry[1]).append(entry)
            room -= 1

    def give_back(self, entries: list[Entry]) -> None:
        """Entries whose claim may or may not have run: first in line again."""
        self.backlog.give_back(entries)

    async def requeue_backlog(self, now_ms: int, held: bool = True) -> None:
        """Hand back entries read but never claimed (and those held for their time, unless
        `held` is false), so another worker runs them on time rather than after the
        reclaimer's idle timeout. A held entry goes back without its `f`: the slot's `nb`
        keeps it from starting early (claim.lua)."""
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        drained = self.backlog.drain()
        if held:
            drained += [entry for _, _, entry in self.early]
            self.early.clear()
        for shard, lane_name, msg_id, slot_id in drained:
            entries.setdefault(shard, []).append((lane_name, msg_id, slot_id))
            self.carried.pop(slot_id, None)
        await scripts.run_async(self.redis, [
            scripts.requeue(self.keys.prefix(s), now_ms, self.events_maxlen, items)
            for s, items in entries.items()])

    def prefetch(self, pipe: Any, count: int) -> int:
        """Append a non-blocking read of up to `count` entries (per priority) to a claim's
        pipeline (scripts.run_async_then)."""
        pipe.execute_command(*self._xreadgroup(-(-count // self._per_priority), None))
        return 1

    def _xreadgroup(self, count: int, block_ms: int | None,
                    start: str | None = None) -> tuple[Any, ...]:
        # "XREADGROUP GROUP" as the command name: redis-py splits it into two arguments but
        # finds no reply callback under it, so the reply stays raw lists. Its XREADGROUP
        # callback builds a dict per entry, a cost a busy worker's CPU shows (bench burndown).
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        tail = self._read_tail if start is None else (
            "STREAMS", *(key for key, _, _ in self.streams), *(start for _ in self.streams))
        return ("XREADGROUP GROUP", DISPATCH_GROUP, self.consumer, "COUNT", count, *block,
                *tail)

    def add(self, reply: Any, skip: Collection[str] = ()) -> None:
        """A raw XREADGROUP reply: {stream key: [[entry id, [b"s", slot id, ...]], ...]}
        (RESP3), or the same pairs as a list (RESP2). After `s` an entry may carry its job's
        fields (b"t", task, b"p", payload, b"o", timeout, b"d", delivery: carry_entry in
        _lib.lua), and one dispatched early ends with b"f", not before ms. An entry deleted
        from the stream comes without fields (its slot is the sweeper's to find)."""
        now = 0
        carried = self.carried
        if len(carried) > self.carry_cap:  # entries that left without a claim: start over
            carried.clear()
        for key, messages in (reply.items() if isinstance(reply, dict) else reply or ()):
            shard, lane_name, waiting = self._stream_of[key]
            for msg_id, fields in messages:
                if fields:
                    slot = fields[1].decode()
                    if slot in skip:
                        continue
                    n = len(fields)
                    if n >= 10 and fields[2] == b"t":
                        carried[slot] = (fields[3], fields[5], fields[7], fields[9])
                    elif slot in carried:
                        # An older entry's fields are not this one's: its slot was made again
                        # (a redefinition, redefine.lua) or dispatched again since.
                        del carried[slot]
                    if n > 3 and fields[n - 2] == b"f":
                        now = now or self.clock.now_ms()
                        not_before = int(fields[n - 1])
                        if not_before > now:
                            self.hold((shard, lane_name, msg_id, slot), not_before)
                            continue
                    waiting.append((shard, lane_name, msg_id, slot))


def _from_start(tail: tuple[Any, ...]) -> tuple[Any, ...]:
    """A shard's STREAMS tail with every id "0": this consumer's own pending entries."""
    keys = tail[1:1 + (len(tail) - 1) // 2]
    return (*keys, *("0" for _ in keys))


def _pairs(reply: Any) -> list[Any]:
    return list(reply.items()) if isinstance(reply, dict) else list(reply or ())
