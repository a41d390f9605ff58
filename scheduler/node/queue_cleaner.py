"""Keeps each shard's `lanes` index to the queues in use (a scheduler node's maintenance loop).

Every script that adds an entry to a dispatch stream names its lane in the shard's `lanes`
index in the same call (_lib.lua's index_lane); `sched status`, the exporter and the
reclaimer read only indexed lanes. Without cleaning, the index would keep every lane a
namespace ever used: a namespace that has seen thousands of queue names would pay for each
of them at every status read and every reclaim pass. `run_once()` runs
`lua/clean_lanes.lua` on each shard the node owns: a lane that had no write for `idle_s`
and holds nothing (no entry undelivered, none pending) leaves the index, atomically on its
shard, so a submit that races it indexes the lane again and is never lost. Streams and
consumer groups are left alone: a worker reading a queue never notices.

Why no cap on queue names instead: a cap would refuse real work because of names that no
longer matter, and counting names across shards would put a namespace-wide key on the
submit path. With cleaning, what is indexed is bounded by the queues used within `idle_s`.

Namespaces written by versions that listed queue names in `<ns>:queues` (a set only growing)
are moved over by the owner of shard 0: each listed name's lanes are indexed on every shard
as long idle (so the next pass keeps only those that hold something), and the name leaves
the set.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio

import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys, lanes
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Cleaned

log = logging.getLogger("scheduler.node.queue_cleaner")

IDLE_S = 3600.0  # a lane is listed this long after its last entry, once it holds nothing
BATCH = 1000  # lanes looked at per shard per call


class QueueCleaner(Service):
    what = "queue index cleaning"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: Sequence[int],
                 clock: Clock, *, idle_s: float = IDLE_S, batch: int = BATCH,
                 total_shards: int = 0) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = list(shards)  # the shards this node owns
        self.total_shards = total_shards  # the owner of shard 0 moves old names to them all
        self.clock = clock
        self.idle_ms = int(idle_s * 1000)
        self.batch = batch
        # Looked at a few times per idle time, at most once a minute.
        self.interval_s = min(60.0, max(0.5, idle_s / 4))
        self.removed = 0  # lanes dropped from the index since start

    async def run_once(self) -> int:
        """One call per owned shard; returns how many idle lanes are still to look at."""
        if not self.shards:
            return 0
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        if 0 in self.shards and self.total_shards:
            await self._move_old_names()
        calls = [scripts.clean_lanes(self.keys.prefix(s), now, now - self.idle_ms, self.batch)
                 for s in self.shards]
        replies = [Cleaned.decode(r) for r in await scripts.run_async(self.redis, calls)]
        removed = sum(r.removed for r in replies)
        if removed:
            self.removed += removed
            log.info("%d idle lane(s) holding nothing left the queue index", removed)
        return sum(r.left for r in replies)

    async def _move_old_names(self) -> None:
        names: set[Any] = await transport.call(self.redis, "smembers", self.keys.queues)
        if not names:
            return
        listed = sorted(n.decode() if isinstance(n, bytes) else n for n in names)
        pipe = transport.pipeline(self.redis)
        for shard in range(self.total_shards):
            pipe.zadd(self.keys.lane_index(shard),
                      {lane: 0 for name in listed for lane in lanes(name)}, nx=True)
        await transport.send(pipe)
        await transport.call(self.redis, "srem", self.keys.queues, *listed)
        log.info("moved %d queue name(s) from %s into the shards' lane indexes", len(listed),
                 self.keys.queues)

    async def run_to_end(self) -> int:
        """Passes until no idle lane is left to look at (a tool's or a test's one-off
        cleaning); how many lanes left the index since start."""
        while await self.run_once():
            pass
        return self.removed

    def delay(self, left: int) -> float:
        return 0 if left else self.interval_s
