"""Shard ownership among scheduler nodes: who promotes and materializes which shard.

Every `run_once()` (about every ttl/3) a node refreshes its entry in `<ns>:schedulers`
(score: Redis time), drops entries older than the lease ttl, and aims for
ceil(shards / live nodes) shards: it renews the leases it keeps, releases the extras and takes
free ones, starting from an offset given by its rank so that nodes do not all reach for the
same shards. A lease (scripts `lease`) is `<prefix>owner` SET NX PX with a fencing epoch.

So a joining node gets its share after the others' next tick, and a node that dies loses its
shards when its leases run out (ttl). Ownership only spreads work: every script a shard's
owner runs is correct if two nodes run it at once, so a paused node that wakes up after its
lease expired does no harm.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import redis.asyncio

import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Lease

log = logging.getLogger("scheduler.node.leases")


class ShardLeases(Service):
    what = "shard lease renewal"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: int, clock: Clock,
                 node_id: str, *, ttl_s: float = 5.0,
                 on_change: Callable[[list[int]], None] | None = None,
                 events_maxlen: int = EVENTS_MAXLEN) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = shards
        self.clock = clock
        self.node_id = node_id
        self.ttl_ms = int(ttl_s * 1000)
        self.interval_s = ttl_s / 3
        self.on_change = on_change
        self.events_maxlen = events_maxlen
        self.owned: dict[int, int] = {}  # shard -> epoch

    async def run_once(self) -> list[int]:
        """One round of heartbeat and rebalancing; returns the shards owned afterwards."""
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        pipe = transport.pipeline(self.redis)
        pipe.zadd(self.keys.schedulers, {self.node_id: now})
        pipe.zremrangebyscore(self.keys.schedulers, "-inf", now - self.ttl_ms)
        pipe.zrange(self.keys.schedulers, 0, -1)
        for s in range(self.shards):
            pipe.get(self.keys.owner(s))
        out = await transport.send(pipe)
        nodes = sorted(n.decode() for n in out[2])
        holders = out[3:]
        target = math.ceil(self.shards / max(1, len(nodes)))
        rank = nodes.index(self.node_id) if self.node_id in nodes else 0
        preferred = [(rank * target + i) % self.shards for i in range(self.shards)]
        held = [s for s in preferred if s in self.owned]
        keep, extra = held[:target], held[target:]
        free = [s for s in preferred if holders[s] is None and s not in self.owned]
        take = free[:max(0, target - len(keep))]
        calls = [scripts.lease(self.keys.prefix(s), now, self.events_maxlen, self.node_id,
                               self.ttl_ms, "acquire") for s in keep + take]
        calls += [scripts.lease(self.keys.prefix(s), now, self.events_maxlen, self.node_id,
                                self.ttl_ms, "release") for s in extra]
        replies = await scripts.run_async(self.redis, calls)
        before = sorted(self.owned)
        for s, reply in zip(keep + take, map(Lease.decode, replies), strict=False):
            if reply.held:
                self.owned[s] = reply.epoch
            elif self.owned.pop(s, None) is not None:
                log.warning("lost the lease on shard %d (now %r)", s, reply.holder)
        for s in extra:
            self.owned.pop(s, None)
        after = sorted(self.owned)
        if after != before:
            log.info("node %s owns shards %s (%d nodes)", self.node_id, after, len(nodes))
            if self.on_change:
                self.on_change(after)
        return after

    async def release_all(self) -> None:
        """Give every lease back and leave the registry, so others take over at once."""
        now = self.clock.now_ms()
        calls = [scripts.lease(self.keys.prefix(s), now, self.events_maxlen, self.node_id,
                               self.ttl_ms, "release") for s in sorted(self.owned)]
        await scripts.run_async(self.redis, calls)
        await transport.call(self.redis, "zrem", self.keys.schedulers, self.node_id)
        self.owned.clear()
        if self.on_change:
            self.on_change([])

    def delay(self, owned: list[int]) -> float:
        return self.interval_s
