"""Moves due slots (retries now; delayed and cron slots later) from `due` to dispatch streams.

`run_once()` promotes one batch per owned shard in one pipelined round trip. Promoting is
atomic per shard in Lua, so any number of promoters may run at once: ownership of shards only
spreads the work, correctness never depends on it.

That is what keeps start lag low when a node dies: its shards have no owner until their
lease runs out (5 s by default), so every `overdue_interval_s` each promoter also promotes,
on the shards it does not own, the slots more than `overdue_ms` late (one second; on time the
owner gets them first). A dead or frozen owner's slots start about a second late instead of
a lease late, and the shard lease need not shrink.

On its own shards it promotes `ahead_ms` early (promote.lua, "Early"): a slot due within that
horizon is dispatched now and held by the worker that reads it until its time, so the fire
instant of a burst costs Redis only the claims and the commits. The horizon is kept under a
quarter of the workers' lease, so a held entry is never taken for a dead worker's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.scripts.calls as scripts
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Promoted

log = logging.getLogger("scheduler.node.promoter")

OVERDUE_MS = 1000
PROMOTE_AHEAD_MS = 3000  # NodeConfig.promote_ahead_s's default: the cron lookahead


class Promoter(Service):
    what = "promote"
    log = log

    def __init__(self, client: redis.asyncio.Redis, prefixes: Sequence[str], clock: Clock, *,
                 batch: int = 500, max_sleep_s: float = 0.1, events_maxlen: int = EVENTS_MAXLEN,
                 others: Sequence[str] = (), overdue_ms: int = OVERDUE_MS,
                 overdue_interval_s: float = 0.25, ahead_ms: int = 0) -> None:
        super().__init__()
        self.redis = client
        self.prefixes = list(prefixes)  # the owned shards' (the node replaces these two)
        self.others = list(others)  # every other shard's
        self.clock = clock
        self.batch = batch
        self.max_sleep_s = max_sleep_s
        self.events_maxlen = events_maxlen
        self.overdue_ms = overdue_ms
        self.overdue_interval_s = overdue_interval_s
        self.ahead_ms = ahead_ms
        self.promoted = 0
        self._reported = 0  # promoted at the last progress line
        self.promoted_overdue = 0
        self._overdue_at = 0.0

    def progress(self) -> str | None:
        n, self._reported = self.promoted - self._reported, self.promoted
        return f"promoted {n:,} due slot(s) into dispatch in the last {self.progress_every_s:.0f}s" if n else None

    async def run_once(self) -> tuple[int, int]:
        """Returns (slots promoted, when an owned shard has more to promote, or -1)."""
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        owned = list(self.prefixes)
        calls = [scripts.promote(p, now, self.events_maxlen, self.batch, ahead_ms=self.ahead_ms)
                 for p in owned]
        if self.others and time.monotonic() >= self._overdue_at:
            self._overdue_at = time.monotonic() + self.overdue_interval_s
            calls += [scripts.promote(p, now, self.events_maxlen, self.batch,
                                      due_before_ms=now - self.overdue_ms)
                      for p in self.others]
        replies = [Promoted.decode(r) for r in await scripts.run_async(self.redis, calls)]
        promoted = sum(r.promoted for r in replies)
        overdue = sum(r.promoted for r in replies[len(owned):])
        nexts = [r.next_due_ms for r in replies[:len(owned)] if r.next_due_ms >= 0]
        skipped = sum(r.skipped for r in replies)
        self.promoted += promoted
        if promoted:
            metrics.PROMOTED.inc(promoted)
        if overdue:
            self.promoted_overdue += overdue
            metrics.PROMOTED_OVERDUE.inc(overdue)
        if skipped:
            metrics.OCCURRENCES_SKIPPED.inc(skipped)
        return promoted, min(nexts) if nexts else -1

    def delay(self, result: tuple[int, int]) -> float:
        promoted, next_due = result
        if promoted >= self.batch:
            return 0  # a full batch: more may be due right now
        sleep = self.max_sleep_s
        if next_due >= 0:
            sleep = min(sleep, max(0.0, (next_due - self.clock.now_ms()) / 1000))
        return sleep
