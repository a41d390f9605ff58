"""Commits the outcomes of finished runs in batches: one pipelined round trip carries every
shard's `complete`, `fail` and `release` calls. Outcomes wait in memory until Redis took them;
a commit that fails on the connection is kept and retried, and the fencing token makes a
commit that arrives after the lease was lost harmless (Lua refuses it and records the refusal).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TypeVar

import redis.asyncio

from . import metrics, scripts
from .clock import Clock
from .keys import Keys

log = logging.getLogger("scheduler.worker")
T = TypeVar("T")


class Outcomes:
    """What the committer will send next, by shard."""

    __slots__ = ("done", "failed", "released")

    def __init__(self) -> None:
        self.done: defaultdict[int, list[tuple[str, int, int, int]]] = defaultdict(list)
        self.failed: defaultdict[int, list[tuple[str, int, str, str, int, float, int, int]]] = (
            defaultdict(list))
        self.released: defaultdict[int, list[tuple[str, int, int]]] = defaultdict(list)

    def __len__(self) -> int:
        return sum(map(len, self.done.values())) + sum(map(len, self.failed.values())) + sum(
            map(len, self.released.values()))

    def merge(self, newer: Outcomes) -> None:
        """Put `newer` outcomes after these (a failed flush keeps its batch first)."""
        _extend(self.done, newer.done)
        _extend(self.failed, newer.failed)
        _extend(self.released, newer.released)


def _extend(mine: defaultdict[int, list[T]], newer: defaultdict[int, list[T]]) -> None:
    for shard, items in newer.items():
        mine[shard].extend(items)


class Committer:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock, worker_id: str,
                 events_maxlen: int) -> None:
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.events_maxlen = events_maxlen
        self.pending = Outcomes()
        self.wake = asyncio.Event()
        self.refused = 0
        self.committed = 0
        self._stopping = False

    def add_done(self, shard: int, item: tuple[str, int, int, int]) -> None:
        self.pending.done[shard].append(item)
        self.wake.set()

    def add_failed(self, shard: int, item: tuple[str, int, str, str, int, float, int, int]) -> None:
        self.pending.failed[shard].append(item)
        self.wake.set()

    def add_released(self, shard: int, item: tuple[str, int, int]) -> None:
        self.pending.released[shard].append(item)
        self.wake.set()

    def _calls(self, batch: Outcomes, now: int) -> list[scripts.Call]:
        k, w, m = self.keys, self.worker_id, self.events_maxlen
        calls = [scripts.complete(k.prefix(s), now, m, w, items)
                 for s, items in batch.done.items() if items]
        calls += [scripts.fail(k.prefix(s), now, m, w, items)
                  for s, items in batch.failed.items() if items]
        calls += [scripts.release(k.prefix(s), now, m, w, items)
                  for s, items in batch.released.items() if items]
        return calls

    async def run_once(self) -> int:
        """Send everything pending in one round trip; returns how many outcomes Redis took."""
        batch, self.pending = self.pending, Outcomes()
        calls = self._calls(batch, self.clock.now_ms())
        if not calls:
            return 0
        try:
            replies = await scripts.run_async(self.redis, calls)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            batch.merge(self.pending)
            self.pending = batch
            raise
        refused = sum(1 for reply in replies for code in reply if int(code) == 0)
        fails = [int(code) for call, reply in zip(calls, replies, strict=True)
                 if call.script == "fail" for code in reply]
        if fails:
            metrics.RETRIES.inc(fails.count(scripts.Failed.RETRY))
            metrics.DEAD_LETTERED.inc(fails.count(scripts.Failed.DEAD))
        if refused:
            self.refused += refused
            metrics.COMMITS_REFUSED.inc(refused)
            log.warning("%d commit(s) refused: their lease was lost before the outcome arrived "
                        "(the slots were reclaimed or cancelled); see the 'refused' events",
                        refused)
        total = sum(len(r) for r in replies)
        self.committed += total - refused
        return total

    async def run(self) -> None:
        """Flush whenever outcomes arrive; while a flush is in flight new ones accumulate, so
        batches grow with load. Returns after `stop()` once nothing is pending."""
        backoff = 0.05
        while True:
            if not len(self.pending):
                if self._stopping:
                    return
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                await self.run_once()
                backoff = 0.05
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("commit failed (%s); retrying in %.2fs with %d outcomes kept",
                            exc, backoff, len(self.pending))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def stop(self) -> None:
        """Idempotent: finish what is pending, then return from run()."""
        self._stopping = True
        self.wake.set()
