"""A scheduler node (`sched scheduler`): runs the background loops (promoter, reclaimer) over
the namespace's shards.

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
from .reclaimer import Reclaimer

log = logging.getLogger("scheduler.node")


class SchedulerNode:
    def __init__(self, client: redis.asyncio.Redis, *, namespace: str = "sched",
                 clock: Clock | None = None, lease_s: float = 30.0,
                 reclaim_interval_s: float = 1.0) -> None:
        self.redis = client
        self.keys = Keys(namespace)
        self.clock = clock or RedisClock()
        self.lease_ms = int(lease_s * 1000)
        self.reclaim_interval_s = reclaim_interval_s
        self.promoter: Promoter | None = None
        self.reclaimer: Reclaimer | None = None
        self._stop = asyncio.Event()

    async def setup(self) -> None:
        await self.redis.hsetnx(self.keys.meta, "shards", DEFAULT_SHARDS)
        shards = range(int(await self.redis.hget(self.keys.meta, "shards") or DEFAULT_SHARDS))
        self.promoter = Promoter(self.redis, [self.keys.prefix(s) for s in shards], self.clock)
        self.reclaimer = Reclaimer(self.redis, self.keys, shards, self.clock,
                                   lease_ms=self.lease_ms, interval_s=self.reclaim_interval_s)

    async def run(self) -> None:
        await self.setup()
        assert self.promoter is not None and self.reclaimer is not None
        log.info("scheduler node working %d shards", len(self.promoter.prefixes))
        loops = [asyncio.create_task(self.promoter.run(), name="promoter"),
                 asyncio.create_task(self.reclaimer.run(), name="reclaimer")]
        await self._stop.wait()
        self.promoter.stop()
        self.reclaimer.stop()
        await asyncio.gather(*loops)

    def stop(self) -> None:
        self._stop.set()
