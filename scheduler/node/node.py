"""A scheduler node (`sched scheduler`): any number may run against one namespace.

Eight loops share the node's shards: `ShardLeases` decides which shards this node owns (and
tells the others it is alive), the `Promoter` moves their due slots to dispatch streams, the
`Materializer` creates their cron occurrences' slots, the `Reclaimer` recovers slots whose
worker stopped heartbeating, the `QueueCleaner` drops idle empty lanes from their queue
index, the `Expirer` removes their finished work past the namespace's retention, the
`ObjectiveWatch` lists their schedules behind their objective (what `sched status` names),
and, on the owner of shard 0, the `Sweeper` finds slots that fell out of every index.
Ownership only spreads the work; the scripts are correct however many nodes run them on one
shard. That is why the promoter and the materializer also take,
on the shards other nodes own, what those nodes have left overdue: a dead or frozen owner
costs about a second of lag, not a shard lease.

Every loop outlives any Redis error (scheduler/redis/service.py): it logs, backs off, and resumes.

A node started before its namespace exists waits for it, registered in `<ns>:schedulers`
meanwhile (so `sched status` counts it as waiting), and starts once it exists.

Shutdown order (`stop()`, e.g. on SIGTERM): the promoter, materializer, reclaimer, cleaner,
expirer, objective watch and sweeper finish their round and stop; then the leases are released and the node leaves the
registry, so the remaining nodes take its shards on their next tick instead of after the
lease ttl.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import uuid

import msgspec
import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.redis.transport as transport
from scheduler.core.bounds import NODE_BOUNDS
from scheduler.core.errors import ConfigError, NamespaceMissing
from scheduler.core.finite import check_bounds, check_finite
from scheduler.core.keys import Keys
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.core.objective import DEFAULT_OBJECTIVE_WINDOW_S, DEFAULT_ON_TIME_TARGET
from scheduler.node.expirer import Expirer
from scheduler.node.leases import ShardLeases
from scheduler.node.materializer import Materializer
from scheduler.node.objectives import ObjectiveWatch
from scheduler.node.promoter import PROMOTE_AHEAD_MS, Promoter
from scheduler.node.queue_cleaner import IDLE_S, QueueCleaner
from scheduler.node.reclaimer import Reclaimer
from scheduler.node.sweeper import Sweeper
from scheduler.redis.clock import Clock, RedisClock, resync
from scheduler.redis.primary import PrimaryWatch
from scheduler.redis.service import Backoff, ErrorLog

log = logging.getLogger("scheduler.node.node")


class NodeConfig(msgspec.Struct, kw_only=True, frozen=True):
    shard_lease_s: float = 5.0  # shard lease ttl: how long a dead node's shards wait for a new owner
    lease_s: float = 30.0  # the workers' slot lease: pending entries idle this long are reclaimed
    reclaim_interval_s: float = 1.0
    lookahead_s: float = 3.0  # cron slots are created this far ahead of their fire time
    promote_ahead_s: float = PROMOTE_AHEAD_MS / 1000
    """Due slots are dispatched this far ahead of their time, held by a worker until then
    (promoter.py); at most a quarter of `lease_s` is used. 0: at their time."""
    misfire_grace_s: float = 5.0  # later than this, an occurrence is missed (catch-up policy)
    sweep_interval_s: float = 10.0  # between the starts of two orphan sweeps (sweeper.py)
    sweep_keys_per_s: int = 5_000  # pace of the sweep's SCAN: bounds its cost to Redis
    queue_idle_s: float = IDLE_S
    """How long a lane stays in its shard's queue index (what status and the reclaimer walk)
    after its last entry, once it holds nothing (queue_cleaner.py)."""
    events_maxlen: int = EVENTS_MAXLEN
    on_time_target: float = DEFAULT_ON_TIME_TARGET
    """A schedule is behind its objective when the share of its occurrences started on time
    over the last `objective_window_s` is below this (scheduler/core/objective.py)."""
    objective_window_s: float = DEFAULT_OBJECTIVE_WINDOW_S

    def __post_init__(self) -> None:
        check_finite(self)
        if self.shard_lease_s < 0.3:
            raise ConfigError(f"shard lease must be >= 0.3 s, not {self.shard_lease_s}")
        if self.lease_s < 1:
            raise ConfigError(f"lease must be >= 1 s, not {self.lease_s}")
        if self.lookahead_s < 0 or self.misfire_grace_s < 0 or self.promote_ahead_s < 0:
            raise ConfigError("lookahead, promote-ahead and misfire grace must be >= 0 s")
        if self.sweep_interval_s <= 0 or self.sweep_keys_per_s < 1:
            raise ConfigError("the sweep interval must be > 0 s and its pace >= 1 key/s")
        if not 0 < self.queue_idle_s < math.inf:
            raise ConfigError(f"the queue idle time must be a number of seconds > 0, not "
                              f"{self.queue_idle_s}")
        check_bounds(self, NODE_BOUNDS)


class SchedulerNode:
    def __init__(self, client: redis.asyncio.Redis, *, namespace: str = "sched",
                 clock: Clock | None = None, config: NodeConfig | None = None,
                 node_id: str | None = None) -> None:
        self.redis = client
        self.keys = Keys(namespace)
        self.clock = clock or RedisClock()
        self.config = config or NodeConfig()
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        ahead_ms = int(min(self.config.promote_ahead_s, self.config.lease_s / 4) * 1000)
        self.promoter = Promoter(client, [], self.clock, events_maxlen=self.config.events_maxlen,
                                 ahead_ms=ahead_ms)
        self.materializer = Materializer(client, [], self.clock,
                                         lookahead_s=self.config.lookahead_s,
                                         misfire_grace_s=self.config.misfire_grace_s,
                                         events_maxlen=self.config.events_maxlen)
        self.reclaimer = Reclaimer(client, self.keys, [], self.clock,
                                   lease_ms=int(self.config.lease_s * 1000),
                                   interval_s=self.config.reclaim_interval_s,
                                   events_maxlen=self.config.events_maxlen)
        self.sweeper = Sweeper(client, self.keys, self.clock,
                               interval_s=self.config.sweep_interval_s,
                               keys_per_s=self.config.sweep_keys_per_s,
                               events_maxlen=self.config.events_maxlen)
        self.cleaner = QueueCleaner(client, self.keys, [], self.clock,
                                    idle_s=self.config.queue_idle_s)
        self.expirer = Expirer(client, self.keys, [], self.clock)
        self.objectives = ObjectiveWatch(client, self.keys, [], self.clock,
                                         target=self.config.on_time_target,
                                         window_s=self.config.objective_window_s)
        self.leases: ShardLeases | None = None
        self._stop = asyncio.Event()
        self._waited = False  # registered as waiting for the namespace

    def _owned(self, shards: list[int]) -> None:
        assert self.leases is not None
        prefixes = [self.keys.prefix(s) for s in shards]
        others = [self.keys.prefix(s) for s in range(self.leases.shards) if s not in shards]
        self.promoter.prefixes = self.materializer.prefixes = prefixes
        self.promoter.others = self.materializer.others = others
        self.reclaimer.shards = self.cleaner.shards = self.expirer.shards = shards
        self.objectives.shards = shards
        self.cleaner.total_shards = self.expirer.total_shards = self.leases.shards
        self.sweeper.active = 0 in shards

    async def setup(self) -> None:
        # NamespaceMissing until the namespace's first submit creates it (namespace.py)
        shards = namespace.parse(self.keys.ns, await transport.call(
            self.redis, "hmget", self.keys.meta, *namespace.META_FIELDS)).shards
        self.leases = ShardLeases(self.redis, self.keys, shards, self.clock, self.node_id,
                                  ttl_s=self.config.shard_lease_s, on_change=self._owned,
                                  events_maxlen=self.config.events_maxlen)

    async def _start(self) -> bool:
        """setup() and a first share of the shards, tried until Redis lets them (a node may
        start before Redis does); False when stopped first."""
        backoff, errors = Backoff(), ErrorLog(log, "scheduler node setup")
        while not self._stop.is_set():
            try:
                if self.leases is None:
                    await self.setup()
                assert self.leases is not None
                self._owned([])
                await self.leases.run_once()  # take a share before the first promote
                return True
            except Exception as exc:
                errors.error(exc)
                if isinstance(exc, NamespaceMissing):
                    await self._wait_visibly()
                try:
                    await asyncio.wait_for(self._stop.wait(), backoff.next())
                except TimeoutError:
                    pass
        if self._waited:
            await self._leave_waiting()
        return False

    async def _wait_visibly(self) -> None:
        """Register in `<ns>:schedulers` while the namespace does not exist: every node there
        then waits for it (`sched status` counts them). Refreshed at each try, about every
        second; a failure is the next try's to report."""
        try:
            await resync(self.clock, self.redis)
            await transport.call(self.redis, "zadd", self.keys.schedulers,
                                 {self.node_id: self.clock.now_ms()})
            self._waited = True
        except Exception as exc:  # the next setup try meets the same Redis and logs it
            log.debug("could not register as waiting (%s: %s)", type(exc).__name__, exc)

    async def _leave_waiting(self) -> None:
        try:
            await transport.call(self.redis, "zrem", self.keys.schedulers, self.node_id)
        except Exception as exc:  # any running node drops the entry after the shard lease
            log.debug("could not leave the node registry (%s: %s)", type(exc).__name__, exc)

    async def run(self) -> None:
        if not await self._start():
            return
        assert self.leases is not None
        log.info("scheduler node %s started (%d shards)", self.node_id, self.leases.shards)
        # Behind Sentinel: off an old primary the sentinels replaced, within a shard lease.
        primary = PrimaryWatch(self.redis, min(self.config.shard_lease_s,
                                               self.config.lease_s) / 3)
        services = (self.leases, self.promoter, self.materializer, self.reclaimer,
                    self.cleaner, self.expirer, self.objectives, self.sweeper,
                    *([primary] if primary.pool is not None else []))
        loops = [asyncio.create_task(s.run(), name=type(s).__name__) for s in services]
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
        for service in services:
            service.stop()
        stopped.cancel()
        try:
            await asyncio.gather(*loops)
        finally:
            try:
                await self.leases.release_all()
            except Exception as exc:  # they expire by themselves after the shard lease
                log.warning("could not release the shard leases (%s)", exc)
        log.info("scheduler node %s stopped", self.node_id)

    def stop(self) -> None:
        self._stop.set()
