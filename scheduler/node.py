"""A scheduler node (`sched scheduler`): any number may run against one namespace.

Four loops share the node's shards: `ShardLeases` decides which shards this node owns (and
tells the others it is alive), the `Promoter` moves their due slots to dispatch streams, the
`Materializer` creates their cron occurrences' slots, the `Reclaimer` recovers slots whose
worker stopped heartbeating. Ownership only spreads the work; the scripts are correct however
many nodes run them on one shard.

Shutdown order (`stop()`, e.g. on SIGTERM): the promoter, materializer and reclaimer finish
their round and stop; then the leases are released and the node leaves the registry, so the remaining
nodes take its shards on their next tick instead of after the lease ttl.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

import msgspec
import redis.asyncio

from .clock import Clock, RedisClock
from .errors import ConfigError
from .keys import DEFAULT_SHARDS, Keys
from .leases import ShardLeases
from .materializer import Materializer
from .promoter import Promoter
from .reclaimer import Reclaimer

log = logging.getLogger("scheduler.node")


class NodeConfig(msgspec.Struct, kw_only=True, frozen=True):
    shard_lease_s: float = 5.0  # shard lease ttl: how long a dead node's shards wait for a new owner
    lease_s: float = 30.0  # the workers' slot lease: pending entries idle this long are reclaimed
    reclaim_interval_s: float = 1.0
    lookahead_s: float = 3.0  # cron slots are created this far ahead of their fire time
    misfire_grace_s: float = 5.0  # later than this, an occurrence is missed (catch-up policy)
    events_maxlen: int = 1_000_000

    def __post_init__(self) -> None:
        if self.shard_lease_s < 0.3:
            raise ConfigError(f"shard lease must be >= 0.3 s, not {self.shard_lease_s}")
        if self.lease_s < 1:
            raise ConfigError(f"lease must be >= 1 s, not {self.lease_s}")
        if self.lookahead_s < 0 or self.misfire_grace_s < 0:
            raise ConfigError("lookahead and misfire grace must be >= 0 s")


class SchedulerNode:
    def __init__(self, client: redis.asyncio.Redis, *, namespace: str = "sched",
                 clock: Clock | None = None, config: NodeConfig | None = None,
                 node_id: str | None = None) -> None:
        self.redis = client
        self.keys = Keys(namespace)
        self.clock = clock or RedisClock()
        self.config = config or NodeConfig()
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.promoter = Promoter(client, [], self.clock, events_maxlen=self.config.events_maxlen)
        self.materializer = Materializer(client, [], self.clock,
                                         lookahead_s=self.config.lookahead_s,
                                         misfire_grace_s=self.config.misfire_grace_s,
                                         events_maxlen=self.config.events_maxlen)
        self.reclaimer = Reclaimer(client, self.keys, [], self.clock,
                                   lease_ms=int(self.config.lease_s * 1000),
                                   interval_s=self.config.reclaim_interval_s,
                                   events_maxlen=self.config.events_maxlen)
        self.leases: ShardLeases | None = None
        self._stop = asyncio.Event()

    def _owned(self, shards: list[int]) -> None:
        prefixes = [self.keys.prefix(s) for s in shards]
        self.promoter.prefixes = prefixes
        self.materializer.prefixes = prefixes
        self.reclaimer.shards = shards

    async def setup(self) -> None:
        await self.redis.hsetnx(self.keys.meta, "shards", DEFAULT_SHARDS)
        shards = int(await self.redis.hget(self.keys.meta, "shards") or DEFAULT_SHARDS)
        self.leases = ShardLeases(self.redis, self.keys, shards, self.clock, self.node_id,
                                  ttl_s=self.config.shard_lease_s, on_change=self._owned,
                                  events_maxlen=self.config.events_maxlen)

    async def run(self) -> None:
        await self.setup()
        assert self.leases is not None
        log.info("scheduler node %s started (%d shards)", self.node_id, self.leases.shards)
        await self.leases.run_once()  # take a share before the first promote
        loops = [asyncio.create_task(self.leases.run(), name="leases"),
                 asyncio.create_task(self.promoter.run(), name="promoter"),
                 asyncio.create_task(self.materializer.run(), name="materializer"),
                 asyncio.create_task(self.reclaimer.run(), name="reclaimer")]
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
        self.promoter.stop()
        self.materializer.stop()
        self.reclaimer.stop()
        self.leases.stop()
        stopped.cancel()
        try:
            await asyncio.gather(*loops)
        finally:
            await self.leases.release_all()
        log.info("scheduler node %s stopped", self.node_id)

    def stop(self) -> None:
        self._stop.set()
