"""What wakes a worker's keyed claims (keyed.py) when a key enters one of its queues' rings.

A keyed slot has no dispatch-stream entry, so no blocking read of the worker's sees it
arrive. Instead, a key entering a queue's ring on a shard writes that queue's wake stream
there (`kwake:<queue>`, one entry: _lib.lua's key_enqueue), and a keyed loop with nothing
to take waits on an XREAD of those streams, from the last entry it saw: a key that arrived
after the last look, even between two reads, ends the next read at once, so none is missed.

One read stays in flight across the loop's short sleeps (it is never cancelled to wake the
loop for something else, which would cost a new connection each time); it ends when an entry
comes or its block runs out, and the next sleep starts another. On a Redis Cluster a read
names the streams of one hash tag only, so each shard has a read of its own, sent to its
node, kept in flight the same way: the first to bring an entry ends the wait, and the next
wait starts again only the reads that ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import redis.asyncio

import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport
from scheduler.core.keys import Keys


class KeyWake:
    """A worker's wait for keys entering its queues' rings, over every shard."""

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, block_ms: int) -> None:
        self.redis = client
        self.keys = keys
        self.block_ms = block_ms  # the dispatch streams' read's: within the socket's timeout
        self.per_shard = cluster.is_cluster(client)
        self.last: dict[str, bytes] = {}  # stream key -> the id of the last entry seen
        self._shards: dict[int, list[str]] = {}  # shard -> its streams
        self._read: asyncio.Task[bool] | None = None
        self._reads: dict[int, asyncio.Task[Any]] = {}  # on a Cluster: shard -> its read
        self.woken = 0  # reads that brought an entry (for tests)
        self.queue_of: dict[str, str] = {}  # stream key -> its queue
        self.entered: set[str] = set()  # queues a key entered, as the reads brought them

    async def open(self, shards: int, queues: Iterable[str]) -> None:
        """Watch these queues' wake streams on every shard, from their newest entry on."""
        queues = list(queues)
        self._shards = {s: [self.keys.key_wake(s, q) for q in queues] for s in range(shards)}
        self.queue_of = {self.keys.key_wake(s, q): q for s in range(shards) for q in queues}
        streams = [key for keys in self._shards.values() for key in keys]
        pipe = transport.pipeline(self.redis)
        for key in streams:
            pipe.xrevrange(key, "+", "-", count=1)
        newest = await transport.send(pipe)
        self.last = {key: entries[0][0] if entries else b"0-0"
                     for key, entries in zip(streams, newest, strict=True)}

    async def wait(self, seconds: float, *events: asyncio.Event) -> bool:
        """Wait up to `seconds` for a key to enter a ring, or any of `events` to be set;
        True when a key entered one."""
        if not self.last:
            await _first(events, seconds)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            while True:  # a read that ended with nothing (its block ran out) goes on
                if self._read is None:
                    self._read = asyncio.create_task(self._read_all())
                left = deadline - loop.time()
                if left <= 0:
                    return False
                await asyncio.wait([self._read, *waits], timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)
                if not self._read.done():
                    return False  # an event, or the time
                read, self._read = self._read, None
                if read.result():  # a failed read raises here: the loop backs off
                    return True
                if any(t.done() for t in waits):
                    return False
        finally:
            for t in waits:
                t.cancel()

    async def close(self) -> None:
        """End the read in flight (a stopping worker waits for no block)."""
        for task in (self._read, *self._reads.values()):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._read, self._reads = None, {}

    async def _read_all(self) -> bool:
        if not self.per_shard:
            return self._seen(await self._xread(self.redis, list(self.last)))
        # The shards' reads outlive a wait that one of them ended: cancelling the others
        # would drop their connections, and the pass the wake starts would make new ones.
        for shard, keys in self._shards.items():
            if keys and shard not in self._reads:
                self._reads[shard] = asyncio.create_task(
                    self._xread(cluster.node_client(self.redis, keys[0]), keys))
        try:
            done, _ = await asyncio.wait(self._reads.values(),
                                         return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            cluster.mark_stale(self.redis)
            raise
        for shard, task in list(self._reads.items()):
            if task in done:
                del self._reads[shard]
        return sum(self._seen(t.result()) for t in done) > 0  # every one noted

    async def _xread(self, client: Any, streams: list[str]) -> Any:
        return await transport.command(client, "XREAD", "COUNT", 1, "BLOCK", self.block_ms,
                                       "STREAMS", *streams,
                                       *(self.last[key] for key in streams))

    def _seen(self, reply: Any) -> bool:
        """Note the newest entry of each stream in an XREAD reply; True when it has one."""
        if not reply:
            return False
        pairs = reply.items() if isinstance(reply, dict) else reply
        for key, entries in pairs:
            if entries:
                name = key.decode() if isinstance(key, bytes) else key
                self.last[name] = entries[-1][0]
                self.entered.add(self.queue_of.get(name, ""))
        self.woken += 1
        return True


async def _first(events: Iterable[asyncio.Event], seconds: float) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            t.cancel()
