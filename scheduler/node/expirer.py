"""Bounds the finished work a namespace keeps in Redis (every `sched scheduler`, `sched dev`).

A finished slot (and its job, when it was the job's only slot) leaves Redis once it finished
`retention_s` ago or once `retain_max` finished slots of the namespace are younger than it,
whichever comes first; a dead-lettered slot leaves `dead_retention_s` after it died
(scheduler/core/namespace.py `RetentionSettings`, `sched namespace set`). Without this, a
namespace that keeps no history would keep every finished job for good.

Each pass reads the settings from `<ns>:meta` (so a change applies to running nodes without a
restart) and calls `expire.lua` once per shard this node owns, in one round trip. The script
re-checks each slot is terminal and, when the namespace keeps history, removes only what the
snapshotter has committed. Each shard bounds its own share of `retain_max`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Expired

log = logging.getLogger("scheduler.node.expirer")

BATCH = 1000  # entries looked at per shard per call: bounds how long one call holds Redis
INTERVAL_S = 1.0  # between passes that left nothing due
HELD_LOG_S = 60.0  # at most one line this often about slots waiting for history


class Expirer(Service):
    what = "retention of finished work"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: Sequence[int],
                 clock: Clock, *, total_shards: int = 0, batch: int = BATCH,
                 interval_s: float = INTERVAL_S) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = list(shards)  # the shards this node owns
        self.total_shards = total_shards  # the namespace's count: each shard's share
        self.clock = clock
        self.batch = batch
        self.interval_s = interval_s
        self.settings = namespace.RetentionSettings()  # as read at the last pass
        self.removed = 0  # slots removed since start (dead-lettered ones included)
        self.held = 0  # at the last pass: finished slots waiting for the history store
        self.last: list[Expired] = []
        self._told = float("-inf")  # when the held slots were last logged

    async def run_once(self) -> int:
        """One call per owned shard; returns how many slots it removed."""
        if not self.shards:
            return 0
        await resync(self.clock, self.redis)
        pipe = transport.pipeline(self.redis)
        namespace.read_retention(pipe, self.keys)
        self.settings = settings = namespace.parse_retention((await transport.send(pipe))[0])
        now = self.clock.now_ms()
        per_shard = settings.shard_max(self.total_shards or len(self.shards))
        calls = [scripts.expire(self.keys.prefix(s), now, int(settings.retention_s * 1000),
                                per_shard, int(settings.dead_retention_s * 1000), self.batch)
                 for s in self.shards]
        self.last = replies = [Expired.decode(r) for r in await scripts.run_async(self.redis,
                                                                                  calls)]
        removed = sum(r.slots + r.dead for r in replies)
        self.removed += removed
        self.held = sum(r.held for r in replies)
        if self.held and time.monotonic() - self._told >= HELD_LOG_S:
            self._told = time.monotonic()
            log.warning("%d finished slot(s) past the retention wait for the history store "
                        "before they leave Redis: is the snapshotter keeping up?", self.held)
        return removed

    async def run_to_end(self) -> int:
        """Passes until one removes nothing (a tool's or a test's one-off); how many slots
        left Redis since start."""
        while await self.run_once():
            pass
        return self.removed

    def delay(self, removed: int) -> float:
        # A full batch means more is due: go on at once, so removal keeps up with any rate.
        return 0 if removed >= self.batch else self.interval_s
