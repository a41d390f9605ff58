"""Moves due slots (retries now; delayed and cron slots later) from `due` to dispatch streams.

`run_once()` promotes one batch per shard in one pipelined round trip. Promoting is atomic per
shard in Lua, so any number of promoters may run at once: ownership of shards only spreads
the work, correctness never depends on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import redis.asyncio

from . import metrics, scripts
from .clock import Clock
from .loops import pause

log = logging.getLogger("scheduler.promoter")


class Promoter:
    def __init__(self, client: redis.asyncio.Redis, prefixes: Sequence[str], clock: Clock, *,
                 batch: int = 1000, max_sleep_s: float = 0.1, events_maxlen: int = 1_000_000
                 ) -> None:
        self.redis = client
        self.prefixes = list(prefixes)
        self.clock = clock
        self.batch = batch
        self.max_sleep_s = max_sleep_s
        self.events_maxlen = events_maxlen
        self.promoted = 0
        self._stop = asyncio.Event()

    async def run_once(self) -> tuple[int, int]:
        """Returns (slots promoted, earliest due time left in any shard or -1)."""
        if self.clock.stale():
            self.clock.anchor(await self.redis.time())
        now = self.clock.now_ms()
        calls = [scripts.promote(p, now, self.events_maxlen, self.batch) for p in self.prefixes]
        replies = await scripts.run_async(self.redis, calls)
        promoted = sum(int(r[0]) for r in replies)
        nexts = [int(r[1]) for r in replies if int(r[1]) >= 0]
        skipped = sum(int(r[2]) for r in replies)
        self.promoted += promoted
        if promoted:
            metrics.PROMOTED.inc(promoted)
        if skipped:
            metrics.OCCURRENCES_SKIPPED.inc(skipped)
        return promoted, min(nexts) if nexts else -1

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                promoted, next_due = await self.run_once()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("promote failed (%s); retrying", exc)
                promoted, next_due = 0, -1
            except Exception:
                log.exception("promote failed unexpectedly; retrying")
                promoted, next_due = 0, -1
            if promoted >= self.batch:
                continue  # a full batch: more may be due right now
            sleep = self.max_sleep_s
            if next_due >= 0:
                sleep = min(sleep, max(0.0, (next_due - self.clock.now_ms()) / 1000))
            await pause(self._stop, sleep)

    def stop(self) -> None:
        self._stop.set()
