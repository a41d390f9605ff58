"""Retention (run by `sched snapshotter`): finished slots leave Redis `retention_s` after
they finished, once the snapshotter has committed them (it alone adds them to the shard's
`retain` set), and the history store forgets slots that fired more than `history_days` ago
(Postgres drops day partitions; SQLite deletes rows).

`run_once()` is one pass over every shard, one pipelined round trip; `retire.lua` re-checks
each slot is still terminal before deleting it.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.bounds import RETENTION_BOUNDS
from scheduler.core.errors import ConfigError
from scheduler.core.finite import check_bounds, check_finite
from scheduler.core.keys import Keys
from scheduler.history.store import DAY_MS, HistoryStore
from scheduler.redis.clock import Clock, RedisClock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Retired

log = logging.getLogger("scheduler.history.retention")


class RetentionConfig(msgspec.Struct, kw_only=True, frozen=True):
    retention_s: float = 3600.0
    """How long a finished slot stays in Redis after it finished."""
    history_days: int | None = 30
    """Days of history the store keeps; None keeps everything."""
    batch: int = 1000
    interval_s: float = 1.0
    history_interval_s: float = 3600.0

    def __post_init__(self) -> None:
        check_finite(self)
        if self.retention_s < 0:
            raise ConfigError(f"retention_s must be >= 0, not {self.retention_s}")
        if self.history_days is not None and self.history_days < 1:
            raise ConfigError(f"history_days must be >= 1 or None, not {self.history_days}")
        if self.batch < 1 or self.interval_s <= 0:
            raise ConfigError("batch must be >= 1 and interval_s > 0")
        check_bounds(self, RETENTION_BOUNDS)


class Retention(Service):
    what = "retention pass"
    log = log

    def __init__(self, client: redis.asyncio.Redis, shards: int = 0, *, namespace: str = "sched",
                 store: HistoryStore | None = None, config: RetentionConfig | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__()
        self.redis = client
        self.keys = Keys(namespace)
        self.shards = shards
        self.store = store
        self.config = config or RetentionConfig()
        self.clock = clock or RedisClock()
        self.deleted_slots = 0
        self.deleted_jobs = 0
        self._last_history = float("-inf")

    async def run_once(self) -> int:
        """Returns the number of slot hashes deleted."""
        if not self.shards:  # 0: the namespace's count, once it has one (namespace.py)
            try:
                self.shards = namespace.parse(self.keys.ns, await transport.call(
                    self.redis, "hmget", self.keys.meta, *namespace.META_FIELDS)).shards
            except namespace.NamespaceMissing:
                return 0
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        calls = [scripts.retire(self.keys.prefix(s), now, int(self.config.retention_s * 1000),
                                self.config.batch) for s in range(self.shards)]
        replies = [Retired.decode(r) for r in await scripts.run_async(self.redis, calls)]
        slots = sum(r.slots for r in replies)
        self.deleted_slots += slots
        self.deleted_jobs += sum(r.jobs for r in replies)
        if (self.store is not None and self.config.history_days is not None
                and time.monotonic() - self._last_history >= self.config.history_interval_s):
            self._last_history = time.monotonic()
            cutoff = now - self.config.history_days * DAY_MS
            await asyncio.to_thread(self.store.drop_before, cutoff)
        return slots

    def delay(self, deleted: int) -> float:
        return 0 if deleted >= self.config.batch * max(1, self.shards) else self.config.interval_s
