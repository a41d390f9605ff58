"""A worker's side of its dispatch streams: which streams it reads, what it read but has not
claimed yet (the backlog), and taking back what a lost reply handed it.

One `Reader` per worker, shared by its claim pipelines (worker.py): every pipeline takes
from the same backlog, so a read of one pipeline feeds the others. A worker reads every lane
(one stream per priority, keys.lanes) of its queues; the backlog hands entries out by
priority (backlog.py has the rule).

On a single Redis one XREADGROUP reads every stream. On a Redis Cluster a read may name the
streams of one hash tag only, so each shard has its own read in flight (`per_shard`), sent to
its node over a plain connection (no COMMAND GETKEYS), blocking while the shard is idle; a
read returns when the first of them brings entries or times out, the others go on and add
what they bring to the backlog when they end.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

import redis.asyncio

from . import cluster, namespace, scripts
from .backlog import Backlog, Entry
from .keys import DISPATCH_GROUP, PRIORITIES, Keys, lane

log = logging.getLogger("scheduler.worker")


class Reader:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, consumer: str, batch: int,
                 events_maxlen: int) -> None:
        self.redis = client
        self.keys = keys
        self.consumer = consumer
        self.batch = batch
        self.events_maxlen = events_maxlen
        self.streams: list[tuple[bytes, int, str]] = []  # (stream key, shard, lane)
        self._per_priority = 1  # streams of one priority: a read's COUNT is shared by these
        self._read_tail: tuple[Any, ...] = ()  # XREADGROUP's STREAMS key... id...
        self._stream_of: dict[bytes, tuple[int, str, deque[Entry]]] = {}
        self.backlog = Backlog()
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
        self._stream_of = {key: (shard, lane_name, self.backlog.lane(lane_name))
                           for key, shard, lane_name in self.streams}
        for shard in range(shards):
            keys = [key for key, s, _ in self.streams if s == shard]
            self._shard_tail[shard] = ("STREAMS", *keys, *(">" for _ in keys))
        await self.create_groups()

    async def create_groups(self) -> None:
        pipe = cluster.pipeline(self.redis)
        namespace.create_groups(pipe, (key for key, _, _ in self.streams), DISPATCH_GROUP)
        namespace.check_groups(await pipe.execute(raise_on_error=False))

    async def read(self, free: int, block_ms: int | None) -> None:
        """One XREADGROUP over every stream. COUNT applies per stream, so a read may bring
        more entries than there are free run slots: the rest wait in `backlog`, unclaimed
        (no lease runs down), and are claimed as runs finish. COUNT is shared among the
        streams of one priority, not all of them: a namespace using one priority must read
        as much per call as it did before lanes."""
        if not self.streams:  # every queue of the worker is limited: limiter.py reads them
            await asyncio.sleep((block_ms or 0) / 1000)
            return
        count = -(-min(self.batch, free) // self._per_priority)
        if self.per_shard:
            return await self._read_shards(count, block_ms)
        try:
            reply: Any = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                *self._xreadgroup(count, block_ms))
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.create_groups()
            return
        except BaseException:
            self.must_recover = True
            raise
        self.add(reply)

    async def _read_shards(self, count: int, block_ms: int | None) -> None:
        for shard, tail in self._shard_tail.items():
            if shard not in self._reads:
                self._reads[shard] = asyncio.create_task(self._read_shard(shard, tail, count,
                                                                          block_ms))
        done, _ = await asyncio.wait(list(self._reads.values()),
                                     return_when=asyncio.FIRST_COMPLETED)
        self._harvest(done)

    async def _read_shard(self, shard: int, tail: tuple[Any, ...], count: int,
                          block_ms: int | None) -> Any:
        node = cluster.node_client(self.redis, tail[1])
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        try:
            return await node.execute_command("XREADGROUP GROUP", DISPATCH_GROUP,
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
            pipe = cluster.pipeline(self.redis)
            for tail in self._shard_tail.values():
                pipe.execute_command("XREADGROUP GROUP", DISPATCH_GROUP, self.consumer,
                                     "COUNT", self.batch, "STREAMS", *_from_start(tail))
            replies = await pipe.execute()
            reply: Any = [pair for r in replies for pair in _pairs(r)]
        else:
            reply = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                *self._xreadgroup(self.batch, None, start="0"))
        self.must_recover = False
        before = len(self.backlog)
        self.add(reply, skip={slot for _, _, _, slot in self.backlog} | set(known))
        if len(self.backlog) > before:
            log.warning("took back %d entries whose read or claim reply was lost",
                        len(self.backlog) - before)

    def take(self, n: int) -> list[Entry]:
        return self.backlog.take(n)

    def give_back(self, entries: list[Entry]) -> None:
        """Entries whose claim may or may not have run: first in line again."""
        self.backlog.give_back(entries)

    async def requeue_backlog(self, now_ms: int) -> None:
        """Hand back entries read but never claimed, so another worker runs them now rather
        than after the reclaimer's idle timeout."""
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, lane_name, msg_id, slot_id in self.backlog.drain():
            entries.setdefault(shard, []).append((lane_name, msg_id, slot_id))
        await scripts.run_async(self.redis, [
            scripts.requeue(self.keys.prefix(s), now_ms, self.events_maxlen, items)
            for s, items in entries.items()])

    def prefetch(self, pipe: Any) -> int:
        """Append a non-blocking read to a claim's pipeline (scripts.run_async_then)."""
        pipe.execute_command(*self._xreadgroup(-(-self.batch // self._per_priority), None))
        return 1

    def _xreadgroup(self, count: int, block_ms: int | None,
                    start: str | None = None) -> tuple[Any, ...]:
        # "XREADGROUP GROUP" as the command name: redis-py splits it into two arguments but
        # finds no reply callback under it, so the reply stays raw lists. Its XREADGROUP
        # callback builds a dict per entry: ~9% of a busy worker's CPU.
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        tail = self._read_tail if start is None else (
            "STREAMS", *(key for key, _, _ in self.streams), *(start for _ in self.streams))
        return ("XREADGROUP GROUP", DISPATCH_GROUP, self.consumer, "COUNT", count, *block,
                *tail)

    def add(self, reply: Any, skip: Collection[str] = ()) -> None:
        """A raw XREADGROUP reply: {stream key: [[entry id, [b"s", slot id]], ...]} (RESP3),
        or the same pairs as a list (RESP2). An entry deleted from the stream comes without
        fields (its slot is the sweeper's to find)."""
        for key, messages in (reply.items() if isinstance(reply, dict) else reply or ()):
            shard, lane_name, waiting = self._stream_of[key]
            for msg_id, fields in messages:
                if fields:
                    slot = fields[1].decode()
                    if slot not in skip:
                        waiting.append((shard, lane_name, msg_id, slot))


def _from_start(tail: tuple[Any, ...]) -> tuple[Any, ...]:
    """A shard's STREAMS tail with every id "0": this consumer's own pending entries."""
    keys = tail[1:1 + (len(tail) - 1) // 2]
    return (*keys, *("0" for _ in keys))


def _pairs(reply: Any) -> list[Any]:
    return list(reply.items()) if isinstance(reply, dict) else list(reply or ())
