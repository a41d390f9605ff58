"""A scheduler node (`sched scheduler`): runs the background loops over the namespace's shards.

For now every node works every shard; the scripts are atomic per shard, so several nodes are
safe (they only repeat each other's work). Shard leases that spread the work come with the
scheduling issue.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio

from .clock import Clock, RedisClock
from .keys import DEFAULT_SHARDS, Keys
from .promoter import Promoter

log = logging.getLogger("scheduler.node")


class SchedulerNode:
    def __init__(self, client: redis.asyncio.Redis, *, namespace: str = "sched",
                 clock: Clock | None = None) -> None:
        self.redis = client
        self.keys = Keys(namespace)
        self.clock = clock or RedisClock()
        self.promoter: Promoter | None = None
        self._stop = asyncio.Event()

    async def setup(self) -> None:
        await self.redis.hsetnx(self.keys.meta, "shards", DEFAULT_SHARDS)
        shards = int(await self.redis.hget(self.keys.meta, "shards") or DEFAULT_SHARDS)
        self.promoter = Promoter(self.redis, [self.keys.prefix(s) for s in range(shards)],
                                 self.clock)

    async def run(self) -> None:
        await self.setup()
        assert self.promoter is not None
        log.info("scheduler node promoting due slots in %d shards", len(self.promoter.prefixes))
        loop = asyncio.create_task(self.promoter.run(), name="promoter")
        await self._stop.wait()
        self.promoter.stop()
        await loop

    def stop(self) -> None:
        self._stop.set()
